"""Near-duplicate detection for incoming articles, run before embedding.

A near-copy of an article already seen (re-published by an aggregator with another headline, a paragraph cut,
boilerplate around it, or transliterated between Serbian Latin and Cyrillic) is linked to the first copy
(``duplicate_of``); once a moderator decided on the first copy, it takes the decided labels without a model
call (:mod:`newsmon.workers.copies`).

Method (Broder 1997): a text is cleaned of boilerplate that unrelated articles share (consent walls, paywalls,
newsletter boxes: :func:`strip_boilerplate`), normalised (:func:`shingle_form`: invisible characters deleted,
NFKC, case folded, Cyrillic -> Latin), cut into the set of its overlapping
``shingle_size``-word shingles, and two texts are near-duplicates when the *resemblance* (Jaccard similarity) of
their shingle sets is at least ``threshold``. Each set is summarised by a MinHash signature of ``num_perm``
32-bit values; the fraction of equal positions of two signatures is an unbiased estimate of the resemblance
(standard error ``sqrt(J(1-J)/num_perm)``, about 0.04 at J=0.7 with 128 permutations). Candidates are found with
MinHash LSH (banding: ``b`` bands of ``r`` rows) and then verified against the stored signatures, so only
articles with an *estimated* Jaccard >= ``threshold`` are returned.

References:
    A. Z. Broder. On the resemblance and containment of documents. Compression and Complexity of Sequences
    (SEQUENCES '97), IEEE, 1997, pp. 21-29.
    A. Z. Broder, S. C. Glassman, M. S. Manasse, G. Zweig. Syntactic clustering of the Web. WWW6, 1997.
    J. Leskovec, A. Rajaraman, J. Ullman. Mining of Massive Datasets, ch. 3 (LSH banding).

Chosen defaults (tuned with ``benchmarks/dedup_quality.py`` on sentinews_sl and reuters21578_en; the figures are
in the benchmark's output, recall = near-copies found over four kinds: new headline, a paragraph or ~20% of the
sentences cut, Latin -> Cyrillic, aggregator boilerplate):

* ``shingle_size = 3`` words. 1- and 2-word shingles make distinct articles on the same subject look alike (shared
  names, numbers and set phrases: on Reuters 2-word shingles flag 39 of 4000 distinct-article checks at t=0.6
  against 25 for 3-word ones, 1-word ones 32 of 2000); 4- and 5-word shingles make every changed word cost 4-5
  shingles, so recall drops (Reuters at t=0.6: 0.896 with 3, 0.887 with 4, 0.867 with 5) while about as many
  distinct articles are flagged (25 / 23 / 22 of 4000). Broder et al. used word shingles of this order for the
  same job.
* ``threshold = 0.6`` estimated Jaccard. Sentinews: recall 0.990, no distinct article above it except the corpus'
  one re-edited wire story (0.625); the hardest genuinely distinct pairs (TF-IDF nearest neighbours, articles
  sharing >= 2 labels) stay below 0.13. Reuters: recall 0.896 (0.999 for new headlines and 0.99 for cut paragraphs
  on articles of >= 60 words; boilerplate around a 40-word item is the weak case, as the boilerplate outweighs the
  item), and what it flags among "distinct" articles are the corpus' own re-sends (RPT-/CORRECTED-, new
  headline) and templated periodic reports ("FED ADDS RESERVES VIA CUSTOMER REPURCHASES") whose labels agree.
  0.5 would add ~5 points of Reuters recall but needs 64 LSH bands of 2 rows (many more chance candidates);
  0.7 loses 11 points of Reuters recall and 2 of sentinews for almost no fewer flags.
* ``num_perm = 128``: standard error of the estimate ~0.043 at J=0.6; 512 bytes of signature per article.
* ``min_words = 8``: a text with fewer than 8 words after normalisation is never declared a duplicate and is not
  indexed. With so few shingles the estimate is meaningless (a 7-word headline has 5 shingles; one changed word
  halves the resemblance) and short texts (a bare headline, "Reuter", a table caption) coincide by chance.

LSH banding: the datasketch optimiser puts the middle of the LSH S-curve at the threshold, so about half the pairs
right at the threshold would never become candidates. As every candidate is verified anyway, this module picks the
band size ``r`` as large as possible such that a pair with Jaccard == ``threshold`` collides in at least one band
with probability >= ``LSH_RECALL_AT_THRESHOLD`` (for 128 permutations and 0.6: 42 bands of 3 rows).

Shared state in Redis (``redis_url`` given): all keys start with ``<namespace>:``.

* ``<namespace>:lsh_bucket_*`` and ``<namespace>:lsh_keys``: the datasketch ``MinHashLSH`` Redis storage
  (``basename = <namespace>:lsh``); every classifier replica that opens the same namespace sees the same index.
* ``<namespace>:sig``: a hash, article id -> signature (``num_perm`` little-endian uint32, 512 bytes for 128).
* ``<namespace>:config``: JSON of the parameters that fix the storage layout (num_perm, bands, rows, shingle size,
  seed, scheme, normalisation version). A replica opened with other values raises ``ValueError`` instead of
  silently mixing incompatible buckets.

Concurrency: one :class:`NearDuplicateIndex` is thread-safe (a lock around every operation; ``check_and_add`` is
atomic within a process). Across replicas nothing is locked: two replicas that check the same near-copy at the same
moment may both miss each other and both add their copy. That is accepted by design: at worst both copies are
classified by the model (the cost of not having the index), and later copies match one of them. A distributed lock
per article would cost a round trip on every article for a rare, harmless race. Adding the *same id* from two
replicas is safe: the signature is written with ``HSETNX`` and only the writer that created it inserts into the LSH
(one ``MULTI/EXEC``); a replica that dies between the two leaves an article that is never a candidate (a missed
link, not a wrong one). Round trips: ``find`` 2 (all band lookups pipelined, then ``HMGET`` of the candidates'
signatures), ``check_and_add`` of a new article 4.
"""

from newsmon.shared.dedup.boilerplate import RecurringLines, strip_boilerplate
from newsmon.shared.dedup.index import (DEFAULT_BOILERPLATE_MIN_DOCS, DEFAULT_MIN_WORDS, DEFAULT_NUM_PERM,
                                        DEFAULT_SHINGLE_SIZE, DEFAULT_THRESHOLD, NearDuplicateIndex)
from newsmon.shared.dedup.lsh import LSH_RECALL_AT_THRESHOLD, lsh_params
from newsmon.shared.dedup.text import serbian_latin_to_cyrillic, shingle_form, shingles

__all__ = [
    "DEFAULT_BOILERPLATE_MIN_DOCS",
    "RecurringLines",
    "DEFAULT_MIN_WORDS",
    "DEFAULT_NUM_PERM",
    "DEFAULT_SHINGLE_SIZE",
    "DEFAULT_THRESHOLD",
    "LSH_RECALL_AT_THRESHOLD",
    "NearDuplicateIndex",
    "lsh_params",
    "serbian_latin_to_cyrillic",
    "shingle_form",
    "shingles",
    "strip_boilerplate",
]
