"""The self-check questions in Chinese (gpulab/exercises/quiz_zh.json) stay in step with the English ones.

A question whose English changed fails here, naming the notebook and question, until its translation follows;
the zh notebooks show the Chinese text with the same code (``quiz("04")``), chosen by the folder they run in.
"""

from __future__ import annotations

import re

import pytest

from gpulab import translation
from gpulab.exercises import Option, Question, chinese, correct
from gpulab.exercises.questions import QUESTIONS
from gpulab.exercises.quiz import check, quiz

CJK = re.compile(r"[\u4e00-\u9fff]")
CODE = re.compile(r"`[^`]+`")
NUMBER_ONLY = re.compile(r"[\d.,\s]+[A-Za-z]{0,3}\.?")


def stale_entries(questions=QUESTIONS) -> list[str]:
    """Every question without a current translation, as 'notebook NN question K: why'."""
    return [f"notebook {notebook} question {number}: {why}" for notebook in questions
            for number, question in enumerate(questions[notebook], start=1)
            if (why := chinese.stale(notebook, number, question))]


def test_every_question_has_a_current_translation():
    assert stale_entries() == [], "\n".join(stale_entries())


def test_a_changed_english_question_is_named(monkeypatch):
    original = QUESTIONS["04"]
    changed = (Question(original[0].prompt + " (reworded)", original[0].options, original[0].answer,
                        original[0].grade, original[0].example), *original[1:])
    assert stale_entries({"04": changed}) == [
        f"notebook 04 question 1: the English changed since it was translated (its hash is now "
        f"{chinese.english_hash(changed[0])}): update the translation and its 'en'"]
    assert chinese.in_chinese("04", 1, changed[0]) is changed[0]  # shown in English until then


def test_translations_are_chinese_and_keep_every_code_span():
    for notebook in QUESTIONS:
        for number, question in enumerate(QUESTIONS[notebook], start=1):
            zh = chinese.in_chinese(notebook, number, question)
            texts = [(question.prompt, zh.prompt)] + [(o.text, z.text) for o, z in zip(question.options, zh.options)] \
                + [(o.why, z.why) for o, z in zip(question.options, zh.options)]
            for english, translated in texts:
                if not NUMBER_ONLY.fullmatch(english):  # "3.5 GB." stays as it is
                    assert CJK.search(translated), (notebook, number, translated)
                missing = [span for span in CODE.findall(english) if span not in translated]
                assert not missing, (notebook, number, missing)


def test_check_answers_in_chinese_in_the_zh_edition():
    question = QUESTIONS["01"][0]
    right, wrong_letter = question.answer, next(letter for letter in question.letters if letter != question.answer)
    said = str(check("01", 1, right, lang="zh"))
    assert said.startswith("正确：") and CJK.search(said[3:])
    said = str(check("01", 1, wrong_letter, lang="zh"))
    assert said.startswith(f"还不对：{wrong_letter}) ") and CJK.search(said[6:])
    assert str(check("01", 1, "z", lang="zh")).startswith("还不对：请用一个选项的字母作答")
    assert str(check("01", 1, right, lang="en")).startswith("Correct: ")
    value = next(i for i, q in enumerate(QUESTIONS["01"], start=1) if q.grade is not None)
    assert str(check("01", value, "not a number", lang="zh")).startswith("还不对：")  # its own message follows
    with pytest.raises(ValueError, match="lang='fr'"):
        check("01", 1, "a", lang="fr")


def test_the_edition_is_the_folder_the_kernel_runs_in(tmp_path):
    assert translation.language(tmp_path / "notebooks" / "zh", environ={}) == "zh"
    assert translation.language(tmp_path / "notebooks", environ={}) == "en"
    assert translation.language(tmp_path / "zh", environ={}) == "en"
    assert translation.language(tmp_path / "notebooks", environ={"GPULAB_LANG": "zh"}) == "zh"
    with pytest.raises(ValueError, match="GPULAB_LANG='de'"):
        translation.language(tmp_path, environ={"GPULAB_LANG": "de"})


def test_the_zh_quiz_widgets_speak_chinese(monkeypatch):
    pytest.importorskip("ipywidgets")
    monkeypatch.delenv("GPULAB_LANG", raising=False)
    box = quiz("04", lang="zh")
    intro, first = box.children[0], box.children[1]
    assert "自我检查：笔记本 04" in intro.value
    assert CJK.search(first.children[0].value)  # the prompt
    button = first.children[2].children[0]
    assert button.description == "检查"
    english = quiz("04", lang="en")
    assert "Check yourself: notebook 04" in english.children[0].value
    assert english.children[1].children[2].children[0].description == "Check"


def test_an_untranslated_question_stays_in_english():
    question = Question("What?", (Option("this", "yes"), Option("that", "no: not that")), "a")
    assert chinese.in_chinese("99", 1, question) is question
    assert str(chinese.check_in_chinese(question, "a")) == "正确：yes"
    assert correct("x").lang is None and str(correct("x")) == "Correct: x"  # the kernel's edition: English here
