"""gpulab.published: every figure measured elsewhere says what, on what, with what, and links its source."""

from __future__ import annotations

import pytest

from gpulab import published


@pytest.mark.parametrize("figure", published.FIGURES, ids=lambda f: f"{f.hardware} {f.what}"[:60])
def test_every_figure_is_fully_attributed(figure):
    assert figure.source.startswith("https://") and figure.value > 0
    assert figure.hardware and figure.software and figure.unit and figure.what
    if figure.spec is not None:
        assert 0 < figure.share_of_spec <= 1.0  # a measurement never beats the spec sheet's peak here


def test_the_table_is_labelled_and_cites_every_source():
    text = published.table("collective")
    assert text.startswith("Measured elsewhere, not by this course")
    assert all(f.source in text for f in published.figures("collective"))


def test_an_unknown_topic_is_refused():
    with pytest.raises(ValueError, match="unknown topic 'fft'"):
        published.figures("fft")
