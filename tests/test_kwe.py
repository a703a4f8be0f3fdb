"""Keyword Boolean expressions: the shared text normalisation, the parser, the matcher, the term index, label rules.

The examples are those of issue 11 (client topics as the industry defines them) and their near-misses.
"""

from __future__ import annotations

import json
import random
import unicodedata
from pathlib import Path

import pytest
from pydantic import ValidationError

from newsmon.shared.kwe import (
    ArticleMeta,
    KweIndex,
    KweSyntaxError,
    LabelRule,
    LabelRuleIndex,
    RuleFilters,
    load_rules,
    parse_kwe,
)
from newsmon.shared.text import normalize_text, tokenize, words

KRKA = 'krka OR krke OR krki OR krko -"reka krk*" -"reki krk*"'
ENERGY = 'energetik* -"energijsk* pijač*"'
PETROVIC = '"марко* петровић*" OR "mark* petrović*"'
RULES_FILE = Path(__file__).resolve().parent / "data" / "kwe_sentinews_rules.jsonl"


def matches(expression: str, text: str) -> bool:
    return parse_kwe(expression).match(text) is not None


# --- the shared normalisation and word segmentation -------------------------------------------------------------

def test_words_are_case_folded_and_split_on_punctuation_and_line_breaks():
    assert words("Krka's d.d.\nje POVEČALA\r\ndobiček (14,97 mio)") == \
        ["krka", "s", "d", "d", "je", "povečala", "dobiček", "14", "97", "mio"]
    assert words("Pogorelec.Nama lani") == ["pogorelec", "nama", "lani"]  # sentences glued in scraped news
    assert words("covid-19 — e-pošta") == ["covid", "19", "e", "pošta"]
    assert words("  ...  ") == [] and words("") == []


def test_invisible_characters_never_split_or_stay_in_a_word():
    for invisible in ("\u00ad", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u200e"):
        assert words(f"Kr{invisible}ka je") == ["krka", "je"], repr(invisible)
    assert words("\ufeffKrka") == ["krka"]


def test_nfd_and_compatibility_forms_fold_to_one_spelling():
    nfd = unicodedata.normalize("NFD", "Petrović Čatež")
    assert nfd != "Petrović Čatež"
    assert words(nfd) == ["petrović", "čatež"]
    assert words("ǉubljana ǆungla ﬁnance") == ["ljubljana", "džungla", "finance"]


def test_serbian_and_macedonian_cyrillic_fold_to_latin():
    assert words("Марко Петровић, Љубљана, Њујорк, Џон, Ђоковић") == \
        ["marko", "petrović", "ljubljana", "njujork", "džon", "djoković"]
    assert words("Đoković Djoković") == ["djoković", "djoković"]
    assert words("Ѓорѓе Ќосе ѕвезда") == ["gjorgje", "kjose", "dzvezda"]
    assert words("čas cas") == ["čas", "cas"]  # č/ć/š/ž are kept: they tell words apart


def test_tokens_keep_the_original_spans():
    text = "Reka\u00adKrka in  МАРКО"
    tokens = tokenize(text)
    assert tokens.words == ("rekakrka", "in", "marko")
    assert [text[s:e] for s, e in tokens.spans] == ["Reka\u00adKrka", "in", "МАРКО"]
    assert tokens.surface(1, 2) == "in  МАРКО"
    assert normalize_text(text) == "rekakrka in marko"


def test_a_word_that_nfkc_splits_keeps_its_span():
    tokens = tokenize("stran ⑴ in ½")
    assert tokens.words == ("stran", "1", "in", "1", "2")
    assert tokens.spans[3] == tokens.spans[4] == (11, 12)


# --- the issue's examples and near-misses --------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["Delnice Krke so zrasle.", "KRKA je objavila rezultate", "Tovarna zdravil Krka",
                                  "v Krki so povedali", "o Krko in Leku"])
def test_the_company_is_matched(text):
    assert matches(KRKA, text)


@pytest.mark.parametrize("text", ["Ob reki Krki smo ujeli postrv.", "Reka Krka je poplavila.",
                                  "Krka d.d. je sponzor čiščenja: ob reki\nKrki so pobrali smeti",
                                  "reka krka", "Krkin direktor", "krk je otok"])
def test_the_river_and_other_words_are_not(text):
    assert not matches(KRKA, text)


def test_krki_is_matched_with_its_evidence():
    text = "Uprava družbe\nKrki očita napake."
    tokens = tokenize(text)
    found = parse_kwe(KRKA).match(tokens)
    assert found is not None
    assert [(h.term.text, h.positions) for h in found.hits] == [("krki", (2,))]
    assert found.evidence(tokens) == {"kwe": KRKA, "hits": [
        {"term": "krki", "words": "Krki", "word_index": 2, "start": 14, "end": 18}]}


@pytest.mark.parametrize("text,expected", [
    ("Energetika je ključna panoga.", True), ("o energetiki in podnebju", True), ("ENERGETIK Petrol", True),
    ("Prepoved prodaje energijskih pijač mladoletnim", False),
    ("Energetika: država bo omejila energijske pijače", False),  # the whole article is excluded
    ("energijska pijača", False), ("Energetska podjetja", False), ("energija", False),
])
def test_energy_sector_not_energy_drinks(text, expected):
    assert matches(ENERGY, text) is expected


@pytest.mark.parametrize("text", ["Марко Петровић је рекао", "Marka Petrovića so videli", "Markom Petrovićem",
                                  "МАРКА ПЕТРОВИЋА", "marko petrovic\u0301"])
def test_a_person_in_both_scripts(text):
    assert matches(PETROVIC, text)


def test_the_latin_rule_matches_cyrillic_text_and_the_reverse():
    assert matches('"mark* petrović*"', "Председник Марко Петровић је рекао")
    assert matches('"марко* петровић*"', "Predsednik Marko Petrović je rekao")
    assert matches("ђоковић*", "Djokoviću je uspelo") and matches("djoković*", "Ђоковићу")
    assert matches("gjorgj*", "Ѓорѓиев") and matches("ѓорѓ*", "Gjorgjiev")


@pytest.mark.parametrize("text", ["Marko je rekel, da Petrović ne pride.", "Petrović Marko", "Mirko Petrović",
                                  "Marko Petrovski"])
def test_a_phrase_needs_its_words_consecutive_and_in_order(text):
    assert not matches('"mark* petrović*"', text)


@pytest.mark.parametrize("text", ["Marko\nPetrović", "Марко\r\nПетровић", "Marko\u2028Petrović",
                                  "MARKO -\n PETROVIĆ"])
def test_a_phrase_split_across_a_line_break_matches(text):
    assert matches(PETROVIC, text)


def test_a_phrase_exclusion_across_a_line_break_excludes():
    assert not matches(KRKA, "Ob reki\nKrki")


@pytest.mark.parametrize("text", ["Kr\u00adka je", "Kr\u200bki je", "Mar\u00adko Petro\u00advić",
                                  "Marko\u2060 Petrović", "\ufeffKrka"])
def test_invisible_characters_inside_words_do_not_break_a_match(text):
    assert matches(KRKA, text) or matches(PETROVIC, text)


def test_nfd_input_and_nfd_rules_match():
    assert matches(PETROVIC, unicodedata.normalize("NFD", "Marko Petrović"))
    assert matches(unicodedata.normalize("NFD", '"mark* petrović*"'), "MARKU PETROVIĆU")
    assert matches(unicodedata.normalize("NFD", ENERGY), "energetika") \
        and not matches(unicodedata.normalize("NFD", ENERGY), "energetika in energijske pijače")


def test_a_prefix_matches_the_bare_prefix_too():
    assert matches("krk*", "otok Krk") and matches("krk*", "Krka") and not matches("krk*", "Kr ka")


# --- the grammar ---------------------------------------------------------------------------------------------------

def test_the_issue_examples_parse_into_terms_and_exclusions():
    krka = parse_kwe(KRKA)
    assert [t.words for t in krka.positives] == [("krka",), ("krke",), ("krki",), ("krko",)]
    assert [(t.words, t.prefix, t.text) for t in krka.excluded] == [
        (("reka", "krk"), (False, True), '"reka krk*"'), (("reki", "krk"), (False, True), '"reki krk*"')]
    assert parse_kwe(PETROVIC).positives[0].words == ("marko", "petrović")
    assert parse_kwe(PETROVIC).positives[0].prefix == (True, True)


@pytest.mark.parametrize("minus", ["-", "\u2013", "\u2014", "\u2212"])
def test_every_minus_sign_excludes(minus):
    expression = parse_kwe(f"krka {minus}\"reka krk*\"")
    assert [t.words for t in expression.excluded] == [("reka", "krk")]
    assert not matches(f"krka {minus}\"reka krk*\"", "reka Krka")


def test_typographic_quotes_make_phrases_and_a_dash_inside_a_word_is_punctuation():
    assert parse_kwe("„reka krk*“ OR »mark* petrović*«").positives[1].words == ("mark", "petrović")
    assert parse_kwe("covid-19").positives[0].words == ("covid", "19")
    assert matches("covid-19", "okužbe s COVID 19") and not matches("covid-19", "covid in 19 drugih")


def test_duplicate_terms_are_dropped():
    assert len(parse_kwe("krka OR Krka OR KRKA OR krke").positives) == 2


@pytest.mark.parametrize("expression,position,reason", [
    ('krka OR "reka krk*', 8, "unbalanced quote"),
    ("krka -", 5, "minus must be directly followed"),
    ("-", 0, "minus must be directly followed"),
    ("krka - reka", 5, "minus must be directly followed"),
    ("krka --reka", 5, "double minus"),
    ("krka OR", 5, "OR at the end"),
    ("OR krka", 0, "OR must stand between"),
    ("krka OR OR krke", 8, "OR must stand between"),
    ('krka OR ""', 8, "empty phrase"),
    ('krka OR "..."', 8, "empty phrase"),
    ("krka OR *", 8, "* must directly follow a word"),
    ("krka OR k*a", 9, "* is only allowed at the end"),
    ("krka OR *ka", 8, "* must directly follow a word"),
    ("krka OR k*", 9, "at least 2"),
    ('-"reka krk*"', 0, "only exclusions"),
    ("-krka -krke", 0, "only exclusions"),
    ("marko petrović", 6, "two terms without OR"),
    ("krka -reka krke", 11, "two terms without OR"),  # an exclusion between two terms is no OR
    ('krka -"reka krk*"krke', 17, "two terms without OR"),
    ("krka or krke", 5, "only operator is upper-case OR"),
    ("krka AND krke", 5, "AND is not part"),
    ("krka OR -krke", 8, "exclusion cannot be an operand of OR"),
    ("krka -reka OR krke", 5, "exclusion cannot be an operand of OR"),
    ("(krka OR krke) -reka", 0, "parentheses"),
    ("NOT reka", 0, "NOT is not part"),
    ("krka !reka", 5, "NOT"),
    ("krka OR krk?", 11, "wildcard ?"),
    ("ime:krka", 0, "field: syntax"),
    ("krka~1", 4, "fuzzy"),
    ('"reka krka"~2', 11, "proximity"),
    ("krka -krka", 6, "both wanted and excluded"),
    ("   ", 0, "empty expression"),
])
def test_a_bad_expression_is_rejected_with_its_position(expression, position, reason):
    with pytest.raises(KweSyntaxError) as caught:
        parse_kwe(expression)
    err = caught.value
    assert reason in err.reason
    assert err.position == position, (err.position, err.reason)
    assert err.expression == expression and f"position {position}" in str(err)
    assert err.caret().splitlines()[1] == " " * position + "^"
    assert err.to_dict() == {"reason": err.reason, "position": position, "expression": expression}


def test_a_long_expression_is_accepted_and_its_error_message_stays_short():
    long_or = " OR ".join(f"ime{i}" for i in range(1000))
    assert len(parse_kwe(long_or).positives) == 1000
    with pytest.raises(KweSyntaxError) as caught:
        parse_kwe(long_or + " OR")
    assert caught.value.position == len(long_or) + 1 and len(str(caught.value)) < 300
    with pytest.raises(KweSyntaxError, match="longer than"):
        parse_kwe("krka OR " * 2000 + "krka")


def test_a_non_string_expression_is_a_type_error():
    with pytest.raises(TypeError):
        parse_kwe(None)  # type: ignore[arg-type]


# --- the term index against the direct matcher ---------------------------------------------------------------------

def test_the_index_finds_the_issue_examples_with_evidence():
    index = KweIndex([("krka", KRKA), ("energy", ENERGY), ("petrović", PETROVIC)])
    text = "Krka in energetika.\nMarku Petroviću so ob reki Krki rekli"
    assert [m.key for m in index.match(text)] == ["energy", "petrović"]
    assert [m.key for m in index.match("Krka in energetika")] == ["krka", "energy"]
    found = index.match(tokenize("Марко Петровић"))[0]
    assert [h.term.text for h in found.hits] == ['"марко* петровић*"', '"mark* petrović*"']


def test_index_add_replace_remove():
    index = KweIndex()
    index.add("a", "krka")
    index.add("b", "krk* -reka")
    assert [m.key for m in index.match("Krka")] == ["a", "b"]
    index.add("a", "lek")  # replaced
    assert [m.key for m in index.match("Krka in Lek")] == ["b", "a"] and len(index) == 2
    assert index.remove("b") and not index.remove("b") and "b" not in index
    assert index.match("Krka") == [] and index.get("a").source == "lek"
    with pytest.raises(KweSyntaxError):
        index.add("c", "krka OR")
    assert "c" not in index and len(index) == 1


_LATIN = ["krk", "krka", "krki", "reka", "reki", "mark", "marko", "petrović", "ab", "abc", "abcd", "b", "ba", "bab"]
_SEPARATORS = [" ", " ", " ", "\n", ", ", " - ", "\u00a0", ". "]
_CYR = str.maketrans({"k": "к", "r": "р", "a": "а", "e": "е", "i": "и", "m": "м", "o": "о", "p": "п", "t": "т",
                      "v": "в", "ć": "ћ", "b": "б", "c": "ц", "d": "д"})


def _random_term(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3])):
        word = rng.choice(_LATIN)
        if rng.random() < 0.2:
            word = word.translate(_CYR)
        if len(word) >= 2 and rng.random() < 0.4:
            word = word[:rng.randint(2, len(word))] + "*"
        parts.append(word.upper() if rng.random() < 0.1 else word)
    return parts[0] if len(parts) == 1 and rng.random() < 0.7 else '"' + " ".join(parts) + '"'


def _random_expression(rng: random.Random) -> str:
    while True:
        positives = " OR ".join(_random_term(rng) for _ in range(rng.randint(1, 4)))
        exclusions = " ".join("-" + _random_term(rng) for _ in range(rng.choice([0, 0, 1, 2])))
        expression = f"{positives} {exclusions}".strip()
        try:
            parse_kwe(expression)
        except KweSyntaxError as err:  # only a term drawn both wanted and excluded is expected
            assert "both wanted and excluded" in err.reason, err
            continue
        return expression


def _random_text(rng: random.Random) -> str:
    out = []
    for _ in range(rng.randint(0, 40)):
        word = rng.choice(_LATIN + ["x", "y", "zz"]) + rng.choice(["", "", "a", "e", "u", "i", "ov"])
        if rng.random() < 0.2:
            word = word.translate(_CYR)
        if rng.random() < 0.1 and len(word) > 2:
            word = word[:1] + "\u00ad" + word[1:]
        out.append(word.capitalize() if rng.random() < 0.2 else word)
        out.append(rng.choice(_SEPARATORS))
    return "".join(out)


def _brute_force(index: KweIndex, text: str) -> list:
    tokens = tokenize(text)
    return [m for key, expression in index if (m := expression.match(tokens, key)) is not None]


@pytest.mark.parametrize("seed", range(5))
def test_the_index_returns_exactly_what_a_full_scan_returns(seed):
    rng = random.Random(seed)
    index = KweIndex()
    for i in range(200):
        index.add(i, _random_expression(rng))
    texts = [_random_text(rng) for _ in range(60)]
    matched = 0
    for text in texts:
        got = index.match(text)
        assert got == _brute_force(index, text), text
        matched += len(got)
    assert matched > 50  # the random rules and texts do meet
    for i in rng.sample(range(200), 100):  # removals and replacements keep the postings right
        if rng.random() < 0.5:
            index.remove(i)
        else:
            index.add(i, _random_expression(rng))
    for text in texts:
        assert index.match(text) == _brute_force(index, text), text


# --- label rules ---------------------------------------------------------------------------------------------------

def test_a_label_rule_validates_its_kwes_with_the_position():
    with pytest.raises(ValidationError) as caught:
        LabelRule(label="krka", kwes=[KRKA, 'krka OR "reka'])
    error = caught.value.errors()[0]
    assert error["loc"] == ("kwes", 1)
    assert isinstance(error["ctx"]["error"], KweSyntaxError) and error["ctx"]["error"].position == 8
    assert "unbalanced quote" in error["msg"]
    with pytest.raises(ValidationError):
        LabelRule(label="krka", kwes=[])
    with pytest.raises(ValidationError):
        LabelRule(label="  ", kwes=["krka"])
    with pytest.raises(ValidationError):
        LabelRule(label="krka", kwes=["krka"], filters={"languages": ["slovene"]})


def test_a_label_rule_round_trips_as_json():
    rule = LabelRule(label=" Krka ", kwes=[KRKA], filters={"languages": ["SL"], "countries": ["si"],
                                                           "sources": [" Dnevnik "]}, require_rule_match=True)
    assert rule.label == "krka" and rule.filters.languages == ("sl",) and rule.filters.countries == ("SI",)
    assert LabelRule.model_validate_json(rule.model_dump_json()) == rule
    assert rule.expressions[0].source == KRKA


def test_label_rule_index_any_kwe_filters_and_retirement():
    rules = LabelRuleIndex([
        LabelRule(label="krka", kwes=[KRKA, "\"novo mesto\""], filters=RuleFilters(languages=["sl", "hr"])),
        LabelRule(label="energetika", kwes=[ENERGY]),
        LabelRule(label="petrović", kwes=[PETROVIC], filters={"sources": ["RTS"], "countries": ["RS"]}),
    ])
    sl = ArticleMeta(lang="sl", country="SI", source="Dnevnik")
    found = rules.match("Novo mesto: Krka in energetika", sl)
    assert [m.label for m in found] == ["krka", "energetika"]
    assert [m.expression.source for m in found[0].matches] == [KRKA, "\"novo mesto\""]
    assert rules.match("Krka", ArticleMeta(lang="en")) == [] and rules.match("Krka") == []
    assert rules.match("Марко Петровић", sl) == []
    assert [m.label for m in rules.match("Марко Петровић", ArticleMeta(country="rs", source="rts"))] == ["petrović"]
    evidence = found[0].evidence(tokenize("Novo mesto: Krka in energetika"))
    assert evidence["label"] == "krka" and evidence["kwes"][1]["hits"][0]["words"] == "Novo mesto"
    assert rules.remove("krka") and "krka" not in rules
    assert [m.label for m in rules.match("Novo mesto: Krka in energetika", sl)] == ["energetika"]
    rules.put(LabelRule(label="energetika", kwes=["nafta"]))
    assert rules.match("energetika", sl) == [] and len(rules) == 2


def test_load_rules_lists_every_bad_line(tmp_path):
    path = tmp_path / "rules.jsonl"
    good = LabelRule(label="krka", kwes=[KRKA]).model_dump_json()
    path.write_text("\n".join([good, "{not json", json.dumps({"label": "x", "kwes": ["a b"]}), "", good]) + "\n",
                    encoding="utf-8")
    with pytest.raises(ValueError) as caught:
        load_rules(path)
    message = str(caught.value)
    assert "line 2" in message and "line 3" in message and "two terms without OR" in message
    assert "line 5: label 'krka' defined twice" in message


# --- the committed sentinews rule file -----------------------------------------------------------------------------

def test_the_sentinews_rule_file_is_valid_and_the_index_agrees_with_a_full_scan(shared_data):
    rules = load_rules(RULES_FILE)
    assert len(rules) == 20
    index = LabelRuleIndex(rules)
    lines = (shared_data / "sentinews_sl" / "articles.jsonl").read_text(encoding="utf-8").splitlines()
    articles = [json.loads(line) for line in lines[::7]]
    hits = 0
    for article in articles:
        tokens = tokenize(article["text"])
        got = [(m.label, [k.expression.source for k in m.matches]) for m in index.match(tokens)]
        want = [(r.label, [e.source for e in r.expressions if e.match(tokens)]) for r in rules]
        assert got == [w for w in want if w[1]]
        hits += len(got)
    assert hits > 20
