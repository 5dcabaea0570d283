"""Self-check questions at the end of every notebook: pick an option or give a value, checked at once.

``quiz("04")`` shows the notebook's questions as widgets (choose or type, press **Check**).
``check("04", 1, "a")`` is the same check in plain Python: it returns a ``Feedback`` that prints
``Correct: ...`` or ``Not yet: ...``, so it works where widgets do not (a terminal, nbval).
A wrong option always says why it is wrong. Each notebook's questions live beside its exercise checks
(``QUESTIONS_NN`` in its topic module); ``gpulab.exercises.questions`` lists them by notebook.
"""

from __future__ import annotations

import ast
import html
import re
from gpulab.exercises import Feedback, Question
from gpulab.exercises.questions import QUESTIONS

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


def check(notebook: object, question: int, answer: object) -> Feedback:
    """Check ``answer`` to question ``question`` (1, 2, ...) of ``notebook``."""
    found = questions(notebook)
    if isinstance(question, bool) or not isinstance(question, int) or not 1 <= question <= len(found):
        raise ValueError(f"question={question!r}: notebook {notebook_key(notebook)} has questions 1 to {len(found)}")
    return found[question - 1].check(answer)


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


def _question_box(number: int, q: Question):
    import ipywidgets as widgets

    prompt = widgets.HTML(f"<b>{number}.</b> {_html(q.prompt)}")
    if q.options:
        labels = [(f"{letter}) {o.text}", letter) for letter, o in zip(q.letters, q.options)]
        entry = widgets.RadioButtons(options=labels, value=None, layout=widgets.Layout(width="auto"))
    else:
        entry = widgets.Text(placeholder=f"for example {q.example}" if q.example else "your answer")
    button = widgets.Button(description="Check")
    verdict = widgets.HTML()

    def on_click(_button) -> None:
        answer = entry.value if q.options else parse_typed(entry.value)
        verdict.value = _feedback_html(q.check(answer))

    button.on_click(on_click)
    return widgets.VBox([prompt, entry, widgets.HBox([button, verdict])])


def quiz(notebook: object):
    """The notebook's questions as widgets, one box each; the last line of a cell displays it."""
    import ipywidgets as widgets

    key = notebook_key(notebook)
    boxes = [_question_box(i, q) for i, q in enumerate(questions(key), start=1)]
    intro = widgets.HTML(f"<b>Check yourself: notebook {key}</b> (or in code: <code>check(\"{key}\", 1, \"a\")</code>)")
    return widgets.VBox([intro, *boxes])
