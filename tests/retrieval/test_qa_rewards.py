"""SQuAD normalization, exact match and token F1 against hand-computed cases."""

import pytest

from agentic_rl.rewards.qa import answer_in_text, best_exact_match, best_f1, exact_match, squad_normalize, token_f1


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  a   cat,  an apple; THE end ", "cat apple end"),
        ("Theodore", "theodore"),  # "the" only as a whole word
        ("1,234", "1234"),
        ("", ""),
    ],
)
def test_squad_normalize(text, expected):
    assert squad_normalize(text) == expected


def test_exact_match():
    assert exact_match("the Orvale.", "Orvale") == 1.0
    assert exact_match("Orvale city", "Orvale") == 0.0
    assert exact_match(None, "Orvale") == 0.0


def test_token_f1_hand_computed():
    # prediction tokens {lina, marsh, chemist}, gold {lina, marsh}: P=2/3, R=1, F1=0.8
    assert token_f1("Lina Marsh, the chemist", "Lina Marsh") == pytest.approx(0.8)
    # common=1, P=1/2, R=1/3 -> F1 = 2*(1/6)/(5/6) = 0.4
    assert token_f1("New Vale", "Vale Port City") == pytest.approx(0.4)
    assert token_f1("x y", "z") == 0.0
    assert token_f1("the", "a") == 1.0  # both empty after normalization
    assert token_f1("", "Orvale") == 0.0
    assert token_f1(None, "Orvale") == 0.0
    # repeated tokens count with multiplicity: common=1, P=1/2, R=1 -> 2/3
    assert token_f1("vale vale", "vale") == pytest.approx(2 / 3)


def test_best_of_several_golds():
    assert best_exact_match("NYC", ["New York City", "NYC"]) == 1.0
    assert best_f1("New York", ["New York City", "NYC"]) == pytest.approx(0.8)
    assert best_exact_match("x", []) == 0.0


def test_answer_in_text_whole_tokens():
    assert answer_in_text(["Orvale"], "Doc 1(Title: X) born in Orvale in 1871.")
    assert not answer_in_text(["Orva"], "born in Orvale")
    assert answer_in_text(["1,234"], "a population of 1234")
