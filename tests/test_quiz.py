"""Self-check questions (gpulab.exercises.quiz): every wrong option says why, values are checked, widgets work."""

from __future__ import annotations

from pathlib import Path

import ipywidgets as widgets
import pytest
import torch

from gpulab.exercises import Feedback
from gpulab.exercises.questions import QUESTIONS
from gpulab.exercises import Option, Question
from gpulab.exercises.quiz import check, notebook_key, parse_typed, questions, quiz

CHOICE = [(nb, i, q) for nb, qs in QUESTIONS.items() for i, q in enumerate(qs, start=1) if q.options]
VALUE = [(nb, i, q) for nb, qs in QUESTIONS.items() for i, q in enumerate(qs, start=1) if q.grade]


def test_every_notebook_has_two_or_three_questions():
    notebooks = sorted(p.name[:2] for p in (Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert sorted(QUESTIONS) == notebooks
    assert all(2 <= len(qs) <= 3 for qs in QUESTIONS.values())
    assert VALUE and CHOICE  # both kinds are asked


@pytest.mark.parametrize("nb,number,q", CHOICE, ids=[f"{nb}-{i}" for nb, i, _ in CHOICE])
def test_each_option_gets_its_own_explanation(nb, number, q):
    assert len(q.options) >= 3 and len({o.text for o in q.options}) == len(q.options)
    for letter, option in zip(q.letters, q.options):
        verdict = check(nb, number, letter.upper() + ")")  # case and a closing parenthesis do not matter
        assert isinstance(verdict, Feedback) and str(verdict).endswith(option.why)
        assert verdict.ok == (letter == q.answer)
        if not verdict.ok:
            assert str(verdict).startswith(f"Not yet: {letter}) ")


@pytest.mark.parametrize("answer", [None, "", "z", 1, "ab", ["a"]])
def test_not_an_option_is_not_yet_and_lists_the_letters(answer):
    verdict = check("01", 1, answer)
    assert not verdict.ok and "a, b, c" in str(verdict) and repr(answer) in str(verdict)


@pytest.mark.parametrize("answer", [3_000_000, "3,000,000", "3_000_000", 3e6, torch.tensor(3_000_000),
                                    parse_typed("3,000,000")])
def test_matmul_count_accepts_any_spelling_of_the_number(answer):
    assert check("01", 2, answer).ok


@pytest.mark.parametrize("answer,hint", [(1_500_000, "multiplications only"), (2 * 100**3, "square"),
                                         (12345, "m x n numbers"), (None, "answer with a number"),
                                         (True, "answer with a number"), ("many", "answer with a number")])
def test_matmul_count_wrong_answers_say_why(answer, hint):
    verdict = check(1, 2, answer)
    assert not verdict.ok and hint in str(verdict)


def test_rows_per_gpu_reuses_the_exercise_check():
    assert check("04", 1, [6, 6, 6, 4]).ok
    assert check("04", 1, parse_typed("[6, 6, 6, 4]")).ok
    wrong = check("04", 1, [6, 6, 5, 5])
    assert not wrong.ok and "torch.chunk" in str(wrong)
    assert not check("04", 1, [8, 8, 6]).ok


@pytest.mark.parametrize("answer,ok,hint", [(32, True, "96"), ([32, 32, 32], True, "96"), ("32", True, ""),
                                            (96, False, "global batch"), (288, False, "DistributedSampler"),
                                            (48, False, "slice"), ([40, 40, 16], False, "answer with a number")])
def test_rows_per_rank(answer, ok, hint):
    verdict = check("05", 2, answer)
    assert verdict.ok is ok and hint in str(verdict)


@pytest.mark.parametrize("answer,ok,hint", [(3, True, "ceil(21/4) = 6"), (0, False, "not a multiple"),
                                            (1, False, "beyond 21"), ("three", False, "answer with a number")])
def test_sampler_padding(answer, ok, hint):
    verdict = check("07", 3, answer)
    assert verdict.ok is ok and hint in str(verdict)


@pytest.mark.parametrize("notebook", [4, "4", "04", "04_data_parallel", "04_data_parallel.ipynb"])
def test_notebook_names(notebook):
    assert notebook_key(notebook) == "04"
    assert questions(notebook) is QUESTIONS["04"]


@pytest.mark.parametrize("notebook", ["99", "00", "", "abc", True, None])
def test_unknown_notebook_is_a_one_line_error(notebook):
    with pytest.raises(ValueError, match=rf"^no questions for notebook .*: use one of 01, 02, .*{max(QUESTIONS)}$"):
        check(notebook, 1, "a")


@pytest.mark.parametrize("question", [0, 4, -1, "1", 1.0, True])
def test_question_number_out_of_range(question):
    with pytest.raises(ValueError, match=r"notebook 02 has questions 1 to 3"):
        check("02", question, "a")


def test_a_question_is_either_choice_or_value():
    with pytest.raises(ValueError, match="either options or a grade"):
        Question("neither")
    with pytest.raises(ValueError, match="is not one of its options"):
        Question("bad answer", (Option("x", "because"), Option("y", "because")), answer="c")


def test_parse_typed():
    assert parse_typed(" [8, 8, 8, 6] ") == [8, 8, 8, 6]
    assert parse_typed("2_000_000") == 2_000_000
    assert parse_typed("2,000,000") == "2,000,000"
    assert parse_typed("__import__('os')") == "__import__('os')"  # never evaluated


def _parts(box):
    entry = box.children[1]
    button, verdict = box.children[2].children
    return entry, button, verdict


def test_widgets_check_a_choice_and_a_typed_value():
    shown = quiz("05")
    assert isinstance(shown, widgets.VBox) and len(shown.children) == 1 + len(QUESTIONS["05"])
    entry, button, verdict = _parts(shown.children[1])
    assert isinstance(entry, widgets.RadioButtons) and entry.value is None
    button.click()
    assert "Not yet" in verdict.value and "None" in verdict.value
    entry.value = "b"
    button.click()
    assert "Not yet: b)" in verdict.value and QUESTIONS["05"][0].options[1].why in verdict.value
    entry.value = QUESTIONS["05"][0].answer
    button.click()
    assert "Correct" in verdict.value
    typed, button, verdict = _parts(shown.children[2])
    assert isinstance(typed, widgets.Text)
    typed.value = "96"
    button.click()
    assert "Not yet" in verdict.value
    typed.value = "32"
    button.click()
    assert "Correct" in verdict.value


def test_every_notebook_quiz_builds():
    for nb, qs in QUESTIONS.items():
        assert len(quiz(nb).children) == 1 + len(qs)


@pytest.mark.parametrize("text,value", [("2,000,000", 2_000_000), ("1,050,624", 1_050_624), ("1,000.5", 1000.5),
                                        ("402,7", 402.7), ("4,02", 4.02), ("-3,5", -3.5), ("402.7", 402.7),
                                        ("1,2,3", None), ("4,0,2", None), ("many", None)])
def test_typed_numbers_read_thousands_and_decimal_commas(text, value):
    """A learner who writes a decimal comma (402,7) is read as meaning 402.7, not 4027."""
    from gpulab.exercises import as_number

    assert as_number(text) == value


def test_a_notebook_imports_only_its_own_questions():
    import subprocess
    import sys

    code = ("import sys; from gpulab.exercises.quiz import questions; questions('04'); "
            "print(sorted(m for m in sys.modules if m.startswith('gpulab.exercises.') and m != 'gpulab.exercises.quiz'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    # chinese: the quiz's Chinese text for the zh edition, read from its catalogue only when asked for
    assert out.strip() == "['gpulab.exercises.chinese', 'gpulab.exercises.data_parallel', 'gpulab.exercises.questions']", out
