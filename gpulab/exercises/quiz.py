"""Self-check questions at the end of every notebook: pick an option or give a value, checked at once.

``quiz("04")`` shows the notebook's questions as widgets (choose or type, press **Check**).
``check("04", 1, "a")`` is the same check in plain Python: it returns a ``Feedback`` that prints
``Correct: ...`` or ``Not yet: ...``, so it works where widgets do not (a terminal, nbval).
A wrong option always says why it is wrong. Each notebook's questions live beside its exercise checks
(``QUESTIONS_NN`` in its topic module); ``gpulab.exercises.questions`` lists them by notebook.
"""

from __future__ import annotations

import ast
import dataclasses
import html
import re
from gpulab.exercises import Feedback, Question, chinese
from gpulab.exercises.questions import QUESTIONS
from gpulab.translation import LANGUAGES, language

#: the widgets' own words in each edition
WORDS = {"en": {"title": "Check yourself: notebook {key}", "or": "or in code", "button": "Check",
                "example": "for example {example}", "blank": "your answer"},
         "zh": {"title": "自我检查：笔记本 {key}", "or": "也可以用代码", "button": "检查",
                "example": "例如 {example}", "blank": "你的答案"}}

def notebook_key(notebook: object) -> str:
    """``"04"`` for ``4``, ``"4"``, ``"04"`` or ``"04_data_parallel"``."""
    match = re.match(r"^\s*(\d{1,2})(?:_\w*)?(?:\.ipynb)?\s*$", str(notebook))
    key = match.group(1).zfill(2) if match and not isinstance(notebook, bool) else None
    if key not in QUESTIONS:
        raise ValueError(f"no questions for notebook {notebook!r}: use one of {', '.join(QUESTIONS)}")
    return key


def questions(notebook: object) -> tuple[Question, ...]:
    """The questions of one notebook, in order (question 1 first)."""
    return QUESTIONS[notebook_key(notebook)]


def _language(lang: str | None) -> str:
    if lang is None:
        return language()
    if lang not in LANGUAGES:
        raise ValueError(f"lang={lang!r}: use one of {', '.join(LANGUAGES)}, or None for the notebook's edition")
    return lang


def check(notebook: object, question: int, answer: object, lang: str | None = None) -> Feedback:
    """Check ``answer`` to question ``question`` (1, 2, ...) of ``notebook``.

    ``lang``: ``"en"`` or ``"zh"``; None: the edition the notebook runs in (:func:`gpulab.translation.language`).
    """
    found = questions(notebook)
    if isinstance(question, bool) or not isinstance(question, int) or not 1 <= question <= len(found):
        raise ValueError(f"question={question!r}: notebook {notebook_key(notebook)} has questions 1 to {len(found)}")
    if _language(lang) == "zh":
        key = notebook_key(notebook)
        return chinese.check_in_chinese(chinese.in_chinese(key, question, found[question - 1]), answer)
    return dataclasses.replace(found[question - 1].check(answer), lang="en")


def parse_typed(text: str) -> object:
    """What a learner typed in a box, as a Python value when it is a literal (``[8, 8]``, ``32``), else the text."""
    text = text.strip()
    if re.fullmatch(r"[+-]?\d{1,3}(,\d{3})+(\.\d*)?", text):
        return text  # 2,000,000 is one number written with separators, not a tuple
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def _html(text: str) -> str:
    """Escape text and show `backticked` parts as code."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _feedback_html(feedback: Feedback) -> str:
    color = "#1a7f37" if feedback.ok else "#b35900"
    return f'<span style="color:{color}">{_html(str(feedback))}</span>'


def _question_box(number: int, q: Question, lang: str = "en"):
    import ipywidgets as widgets

    words = WORDS[lang]
    prompt = widgets.HTML(f"<b>{number}.</b> {_html(q.prompt)}")
    if q.options:
        labels = [(f"{letter}) {o.text}", letter) for letter, o in zip(q.letters, q.options)]
        entry = widgets.RadioButtons(options=labels, value=None, layout=widgets.Layout(width="auto"))
    else:
        entry = widgets.Text(placeholder=words["example"].format(example=q.example) if q.example else words["blank"])
    button = widgets.Button(description=words["button"])
    verdict = widgets.HTML()

    def on_click(_button) -> None:
        answer = entry.value if q.options else parse_typed(entry.value)
        verdict.value = _feedback_html(chinese.check_in_chinese(q, answer) if lang == "zh"
                                       else dataclasses.replace(q.check(answer), lang="en"))

    button.on_click(on_click)
    return widgets.VBox([prompt, entry, widgets.HBox([button, verdict])])


def quiz(notebook: object, lang: str | None = None):
    """The notebook's questions as widgets, one box each; the last line of a cell displays it.

    ``lang``: ``"en"`` or ``"zh"``; None: the edition the notebook runs in (a kernel in ``notebooks/zh``: Chinese).
    """
    import ipywidgets as widgets

    key, lang = notebook_key(notebook), _language(lang)
    words = WORDS[lang]
    shown = [chinese.in_chinese(key, i, q) if lang == "zh" else q for i, q in enumerate(questions(key), start=1)]
    boxes = [_question_box(i, q, lang) for i, q in enumerate(shown, start=1)]
    code = f'<code>check("{key}", 1, "a")</code>'
    intro = widgets.HTML(f"<b>{words['title'].format(key=key)}</b> ({words['or']}: {code})" if lang == "en"
                         else f"<b>{words['title'].format(key=key)}</b>（{words['or']}：{code}）")
    return widgets.VBox([intro, *boxes])
