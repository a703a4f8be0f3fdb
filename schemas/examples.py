"""Realistic example messages of every wire event, as a producer sends them (JSON values, UTC offsets as written).

They are put into the JSON Schema files (``examples``, through :func:`newsmon.schemas.base.Event`'s
``json_schema_extra``) for the teams that write the ingestion feed and the moderation tool, and the README
shows one per topic. ``tests/test_schemas.py`` validates each against its pydantic model, so an example can
never drift from the schema. Slovene (the demo's language) and Serbian in Cyrillic script; the neighbour
ids and titles come from the sentinews_sl corpus.
"""

from __future__ import annotations

__all__ = ["ARTICLE_EXAMPLES", "DECISION_EXAMPLES", "LABEL_EVENT_EXAMPLES", "PROPOSAL_EXAMPLES"]

_MODEL = "multilingual-e5-small@3f9c1a0b7d2e4c51+onnx-int8-v1"  # the CPU default runtime (encoder.runtime)


def _collection(lang: str) -> str:
    return f"newsmon_{lang}_multilingual-e5-small_3f9c1a0b7d2e4c51_onnx-int8-v1"


ARTICLE_EXAMPLES: list[dict] = [
    {
        "schema_version": 2,
        "article_id": "sta-2024-05-06-0412",
        "title": "Cene bencina in dizla bodo od torka nižje",
        "body": "Cene naftnih derivatov bodo od torka nižje. Liter 95-oktanskega bencina bo cenejši za 2,1 centa "
                "in bo stal 1,549 evra, liter dizelskega goriva pa se bo pocenil za 1,8 centa na 1,479 evra. "
                "Vlada trošarin tokrat ni spreminjala.",
        "lang": "sl",
        "outlet": "STA",
        "country": "SI",
        "published_at": "2024-05-06T13:05:00+02:00",
        "url": "https://www.sta.si/3317412/cene-bencina-in-dizla-bodo-od-torka-nizje",
        "section": "gospodarstvo",
    },
    {
        "schema_version": 2,
        "article_id": "rts-2024-5391207",
        "title": "НИС повећао производњу нафте и гаса",
        "body": "Нафтна индустрија Србије је у првом кварталу повећала производњу нафте и гаса за три одсто у "
                "односу на исти период прошле године, саопштено је данас из компаније.",
        "lang": "sr",
        "outlet": "RTS",
        "country": "RS",
        "published_at": "2024-05-02T08:30:00+02:00",
        "url": "https://www.rts.rs/vesti/ekonomija/5391207/nis-proizvodnja.html",
        "section": "економија",
    },
    {
        "schema_version": 1,
        "article_id": "vecer-2024-118733",
        "title": None,
        "body": "Sindikat delavcev Steklarne Hrastnik je napovedal opozorilno stavko, ker se uprava ni odzvala na "
                "zahteve po višjih plačah.",
        "lang": "sl",
        "outlet": "Večer",
        "country": "SI",
        "published_at": "2024-05-03T06:00:00Z",
    },
    {
        "schema_version": 2,
        "article_id": "dnevnik-2024-05-07-3301",
        "title": "V črnomaljski tovarni bodo odpustili 120 delavcev",
        "body": "Uprava tovarne v Črnomlju je sindikatu sporočila, da bo zaradi upada naročil do konca leta "
                "odpustila 120 delavcev. Sindikat zahteva pogajanja o socialnem programu.",
        "lang": "sl",
        "outlet": "Dnevnik",
        "country": "SI",
        "published_at": "2024-05-07T11:10:00+02:00",
        "section": "gospodarstvo",
    },
]
"""``ArticleEvent``: a Slovene article (v2, with its section), a Serbian one in Cyrillic, a version-1 message
without a headline, a Slovene article on lay-offs (the calibrated proposal's article)."""

_SL_RECORD = "newsmon_sl_multilingual-e5-small_3f9c1a0b7d2e4c51_onnx-int8-v1@20240506T030000Z"
_CALIBRATED = {"predictor": "newsmon", "top_k": 75, "tau": 0.12, "threshold": 0.25,
               "bucket_thresholds": [0.65, 0.6, 0.25, 0.35], "lexical_weight": 0.5, "lexical_candidates": 200,
               "components": [{"name": "head_model", "options": {"weight": 0.75, "c": 10.0}}],
               "rules": [{"name": "threshold", "options": {}},
                         {"name": "tail_support", "options": {"support": 3, "neighbours": 3, "similarity": 0.92}},
                         {"name": "new_label_support", "options": {"support": 2, "neighbours": 30,
                                                                   "similarity": 0.8}}],
               "calibration": _SL_RECORD, "source": "calibration", "note": None, "label_thresholds": 0}
_CROSS_LINGUAL = {**_CALIBRATED, "note": f"no calibration record for {_collection('sr')} (searched cross-lingually): "
                                         f"the record of {_collection('sl')}, the largest memory searched"}
_DEFAULTS = {"predictor": "newsmon", "top_k": 50, "tau": 0.04, "threshold": 0.5, "bucket_thresholds": None,
             "lexical_weight": 0.0, "lexical_candidates": 200, "components": [],
             "rules": [{"name": "threshold", "options": {}}, {"name": "too_few_words", "options": {"min_words": 2}}], "calibration": None, "source": "defaults",
             "note": f"no calibration record for {_collection('sl')}: run `newsmon tune` or `newsmon memory build "
                     "--calibrate`", "label_thresholds": 0}

PROPOSAL_EXAMPLES: list[dict] = [
    {
        "schema_version": 7,
        "article_id": "sta-2024-05-06-0412",
        "revision": 0,
        "labels": [
            {"label": "bencin", "score": 0.83, "source": "retrieval", "rule": None, "decided_by": "threshold",
             "threshold": 0.6, "reason": "its score 0.83 is above its threshold 0.60; 9 of the 75 nearest memory "
                                         "articles carry it, the closest at 0.91", "neighbours": [
                {"article_id": "sl-test-707", "similarity": 0.912, "title": "Bencin cenejši, dizel dražji"},
                {"article_id": "sl-test-285", "similarity": 0.897, "title": "Bencin ne bo več rekordno drag"},
                {"article_id": "sl-test-700", "similarity": 0.889,
                 "title": "Bencin spet dosegel rekordne vrednosti"}]},
            {"label": "dizel", "score": 0.61, "source": "retrieval", "rule": None, "decided_by": "threshold",
             "threshold": 0.6, "reason": "its score 0.61 is above its threshold 0.60; 4 of the 75 nearest memory "
                                         "articles carry it, the closest at 0.91", "neighbours": [
                {"article_id": "sl-test-707", "similarity": 0.912, "title": "Bencin cenejši, dizel dražji"},
                {"article_id": "sl-test-502", "similarity": 0.884,
                 "title": "Višje trošarine, nespremenjena cena pogonskih goriv"}]},
        ],
        "candidates": [
            {"label": "trošarine", "score": 0.34, "source": "retrieval", "rule": None, "decided_by": None,
             "threshold": 0.6, "reason": "its score 0.34 is below its threshold 0.60; 2 of the 75 nearest memory "
                                         "articles carry it, the closest at 0.88", "neighbours": [
                {"article_id": "sl-test-502", "similarity": 0.884,
                 "title": "Višje trošarine, nespremenjena cena pogonskih goriv"}]},
            {"label": "nafta", "score": 0.29, "source": "retrieval", "rule": None, "decided_by": None,
             "threshold": 0.35, "reason": "its score 0.29 is below its threshold 0.35; 1 of the 75 nearest memory "
                                          "articles carries it, the closest at 0.89", "neighbours": [
                {"article_id": "sl-test-700", "similarity": 0.889,
                 "title": "Bencin spet dosegel rekordne vrednosti"}]},
        ],
        "duplicate_of": None,
        "model_version": _MODEL,
        "memory_version": _collection("sl"),
        "scoring": _CALIBRATED,
        "abstained": None,
        "timings": {"batch_size": 16, "queue_ms": 212.0, "dedup_ms": 3.1, "embed_ms": 2890.4, "search_ms": 41.7,
                    "score_ms": 0.0, "total_ms": 3180.2},
        "produced_at": "2024-05-06T11:05:04.318Z",
    },
    {
        "schema_version": 6,
        "article_id": "rts-2024-5391207",
        "revision": 0,
        "labels": [
            {"label": "нис", "score": 1.0, "source": "rule", "neighbours": [],
             "rule": {"kwe": "НИС OR \"Нафтна индустрија Србије\" -\"НИС Петрол Бугарска\"",
                      "matched": ["НИС", "Нафтна индустрија Србије"]}},
            {"label": "nafta", "score": 0.57, "source": "retrieval", "rule": None, "neighbours": [
                {"article_id": "sl-test-224", "similarity": 0.861, "title": "Varčna raba energije"},
                {"article_id": "sl-test-700", "similarity": 0.853,
                 "title": "Bencin spet dosegel rekordne vrednosti"}]},
        ],
        "candidates": [
            {"label": "energija", "score": 0.22, "source": "retrieval", "rule": None, "neighbours": [
                {"article_id": "sl-test-224", "similarity": 0.861, "title": "Varčna raba energije"}]},
        ],
        "duplicate_of": None,
        "model_version": _MODEL,
        "memory_version": f"{_collection('hr')}+{_collection('sl')}+{_collection('sr')}",
        "scoring": _CROSS_LINGUAL,
        "abstained": None,
        "timings": {"batch_size": 3, "queue_ms": 95.0, "dedup_ms": 1.2, "embed_ms": 640.9, "search_ms": 58.3,
                    "score_ms": 0.0, "total_ms": 801.6},
        "produced_at": "2024-05-02T06:30:01.027Z",
    },
    {
        "schema_version": 6,
        "article_id": "vecer-2024-118733",
        "revision": 0,
        "labels": [],
        "candidates": [
            {"label": "stavka", "score": 0.46, "source": "retrieval", "rule": None, "neighbours": [
                {"article_id": "sl-test-749", "similarity": 0.874, "title": "Steklarna Luminus na kolektivni dopust"},
                {"article_id": "sl-test-465", "similarity": 0.866, "title": "Zvišanje plač že letos?"}]},
            {"label": "plača", "score": 0.31, "source": "retrieval", "rule": None, "neighbours": [
                {"article_id": "sl-test-465", "similarity": 0.866, "title": "Zvišanje plač že letos?"}]},
        ],
        "duplicate_of": None,
        "model_version": _MODEL,
        "memory_version": _collection("sl"),
        "scoring": _DEFAULTS,
        "abstained": None,
        "timings": {"batch_size": 16, "queue_ms": 180.0, "dedup_ms": 2.9, "embed_ms": 2755.0, "search_ms": 39.8,
                    "score_ms": 0.0, "total_ms": 3021.5},
        "produced_at": "2024-05-03T04:00:03.205Z",
    },
    {
        "schema_version": 2,
        "article_id": "delo-2024-05-06-8812",
        "revision": 1,
        "labels": [
            {"label": "bencin", "score": 0.94, "source": "duplicate", "rule": None, "neighbours": [
                {"article_id": "sta-2024-05-06-0412", "similarity": 0.94, "title": None}]},
            {"label": "cena", "score": 0.94, "source": "duplicate", "rule": None, "neighbours": [
                {"article_id": "sta-2024-05-06-0412", "similarity": 0.94, "title": None}]},
        ],
        "candidates": [],
        "duplicate_of": "sta-2024-05-06-0412",
        "model_version": _MODEL,
        "memory_version": _collection("sl"),
        "scoring": None,
        "timings": {"batch_size": 1, "queue_ms": 0.0, "dedup_ms": 0.0, "embed_ms": 0.0, "search_ms": 0.0,
                    "score_ms": 0.0, "total_ms": 0.0},
        "produced_at": "2024-05-06T11:20:40.551Z",
    },
    {
        "schema_version": 6,
        "article_id": "dnevnik-2024-05-07-3301",
        "revision": 0,
        "labels": [
            {"label": "odpuščanje", "score": 0.208, "source": "retrieval", "rule": None, "decided_by": "set_vote",
             "threshold": 0.65, "neighbours": [
                 {"article_id": "sl-train-1187", "similarity": 0.902, "title": "V Tamu ob delo 300 delavcev"}]},
            {"label": "črnomelj", "score": 0.147, "source": "retrieval", "rule": None, "decided_by": "set_vote",
             "threshold": 0.65, "neighbours": [
                 {"article_id": "sl-train-1187", "similarity": 0.902, "title": "V Tamu ob delo 300 delavcev"}]},
        ],
        "candidates": [
            {"label": "sindikat", "score": 0.181, "source": "retrieval", "rule": None, "decided_by": None,
             "threshold": 0.25, "neighbours": [
                 {"article_id": "sl-train-2210", "similarity": 0.881, "title": "Sindikat napoveduje stavko"}]},
        ],
        "duplicate_of": None,
        "model_version": _MODEL,
        "memory_version": _collection("sl"),
        "scoring": {"predictor": "newsmon", "top_k": 30, "tau": 0.02, "threshold": 0.25,
                    "bucket_thresholds": [0.65, 0.65, 0.25, 0.4], "lexical_weight": 0.0, "lexical_candidates": 200,
                    "components": [],
                    "rules": [{"name": "threshold", "options": {}}, {"name": "set_vote", "options": {"share": 0.45}},
                              {"name": "new_label_support", "options": {"support": 2, "neighbours": 20,
                                                                        "similarity": 0.8}}],
                    "calibration": "newsmon_sl_multilingual-e5-small_3f9c1a0b7d2e4c51_onnx-int8-v1@20240507T030000Z",
                    "source": "calibration", "note": None, "label_thresholds": 0},
        "abstained": None,
        "timings": {"batch_size": 16, "queue_ms": 150.0, "dedup_ms": 2.7, "embed_ms": 2710.3, "search_ms": 44.1,
                    "score_ms": 0.0, "total_ms": 2941.0},
        "produced_at": "2024-05-07T09:12:30.004Z",
    },
]
"""``LabelProposal``: a Slovene article with two labels and two candidates, scored with a calibration record's
parameters (the rule that proposed each label and each label's threshold); a Serbian (Cyrillic) article whose ``sr``
memory is still small (three collections searched, scored with the record of the largest memory searched, as the note
says) with a label from its rule; an article with nothing above the threshold of the defaults (``labels`` empty,
``candidates`` kept; no calibration record yet, as the note says); a near-copy's proposal revised (revision 1) after a
moderator decided on its original (its score and similarity: the estimated Jaccard; no scoring of its own); a
proposal with calibrated decision rules: two labels below their thresholds that the neighbours' label-set vote
proposed, and a candidate with its own threshold."""

DECISION_EXAMPLES: list[dict] = [
    {
        "schema_version": 1,
        "article_id": "sta-2024-05-06-0412",
        "decisions": [{"label": "bencin", "action": "confirmed"}, {"label": "dizel", "action": "confirmed"},
                      {"label": "trošarine", "action": "added"}],
        "moderator": "špela.novak",
        "decided_at": "2024-05-06T13:14:52+02:00",
    },
    {
        "schema_version": 1,
        "article_id": "rts-2024-5391207",
        "decisions": [{"label": "нис", "action": "confirmed"}, {"label": "nafta", "action": "rejected"},
                      {"label": "енергетика", "action": "added"}],
        "moderator": "јелена.петровић",
        "decided_at": "2024-05-02T09:02:11+02:00",
    },
    {
        "schema_version": 2,
        "article_id": "sta-2024-05-06-0412",
        "decisions": [{"label": "bencin", "action": "confirmed"}, {"label": "dizel", "action": "confirmed"},
                      {"label": "trošarine", "action": "added"}],
        "moderator": "špela.novak",
        "decided_at": "2024-05-06T13:15:07+02:00",
        "undoes": "2024-05-06T13:14:52+02:00",
    },
]
"""``ModeratorDecision``: a Slovene moderator confirms two labels and adds a candidate; a Serbian one (Cyrillic labels
and name) confirms, rejects and adds; the Slovene moderator undoes her decision 15 seconds later (version 2)."""

LABEL_EVENT_EXAMPLES: list[dict] = [
    {
        "schema_version": 2,
        "action": "defined",
        "label": "krka",
        "new_label": None,
        "definition": {
            "kwes": ["krka OR krke OR krki OR krko -\"reka krk*\" -\"otok krk*\"", "\"tovarna zdravil novo mesto\""],
            "filters": {"languages": ["sl", "hr"], "countries": ["SI", "HR"], "sources": [], "sections": []},
            "require_rule_match": False,
            "description": "Farmacevtska družba Krka d. d., Novo mesto.",
        },
        "occurred_at": "2024-05-06T08:00:00+02:00",
        "actor": "analitik.petra",
    },
    {
        "schema_version": 2,
        "action": "defined",
        "label": "нис",
        "new_label": None,
        "definition": {
            "kwes": ["НИС OR \"Нафтна индустрија Србије\" -\"НИС Петрол Бугарска\""],
            "filters": {"languages": ["sr"], "countries": ["RS"], "sources": [], "sections": []},
            "require_rule_match": True,
            "description": "Нафтна индустрија Србије а. д., Нови Сад.",
        },
        "occurred_at": "2024-05-01T10:00:00+02:00",
        "actor": "аналитичар.марко",
    },
    {"schema_version": 1, "action": "renamed", "label": "nkbm", "new_label": "nova kbm", "definition": None,
     "occurred_at": "2024-05-06T09:30:00+02:00", "actor": "analitik.petra"},
    {"schema_version": 1, "action": "retired", "label": "vegrad", "new_label": None, "definition": None,
     "occurred_at": "2024-05-06T09:31:00+02:00", "actor": None},
]
"""``LabelEvent``: a Slovene label defined by two KwEs, a Serbian one (Cyrillic KwE, rule match required), a
rename (version 1) and a retirement (version 1)."""
