"""n-gram draft selection of prompt lookup."""

from leapgen.samplers.prompt_lookup import ngram_draft


def test_longest_ngram_wins() -> None:
    # the 2-gram (8, 9) occurs once, followed by 1 2; the 1-gram 9 alone would also match at index 6
    assert ngram_draft([8, 9, 1, 2, 3, 4, 9, 5, 8, 9], 3, 1, 2) == [1, 2]


def test_most_recent_full_length_match_in_repetitive_text() -> None:
    toks = [1, 2, 3] * 3 + [1, 2]
    # the last occurrence of (1, 2) is followed by only one token; the previous one by a full draft
    assert ngram_draft(toks, 2, 1, 4) == [3, 1, 2, 3]
    assert ngram_draft(toks, 2, 1, 4, match="first") == [3, 1, 2, 3]


def test_no_match_and_zero_budget() -> None:
    assert ngram_draft([1, 2, 3, 4], 3, 1, 5) == []
    assert ngram_draft([1, 2, 1, 2], 3, 1, 0) == []
