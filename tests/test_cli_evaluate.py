"""`gpulab evaluate`: bad values exit 2 with one error line; the table and the JSON."""

import json

import pytest

from gpulab.course.cli import main

FAST = ["--repeats", "1", "--improved-epochs", "3", "--members", "2", "--device", "cpu", "--quiet"]


@pytest.mark.parametrize("value", ["0", "-1", "x", "1.5"])
def test_bad_repeats_exit_2_with_one_error_line(value, capsys):
    with pytest.raises(SystemExit) as info:
        main(["evaluate", "--repeats", value])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "--repeats" in err[0]


@pytest.mark.parametrize("option", ["--improved-epochs", "--members"])
def test_bad_sizes_exit_2(option, capsys):
    with pytest.raises(SystemExit) as info:
        main(["evaluate", option, "0"])
    assert info.value.code == 2
    assert capsys.readouterr().err.startswith("error:")


def test_include_b_and_no_b_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as info:
        main(["evaluate", "--include-b", "--no-b"])
    assert info.value.code == 2
    assert capsys.readouterr().err.startswith("error:")


def test_bad_device_exit_2(capsys):
    assert main(["evaluate", "--device", "tpu", "--repeats", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "tpu" in err[0]


def test_no_b_prints_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "scores.json"
    assert main(["evaluate", *FAST, "--no-b", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    for model in ("article MLP", "improved MLP", "LinearRegression", "RandomForest", "GradientBoosting"):
        assert model in text
    assert "without B" in text and "with B " not in text
    report = json.loads(out.read_text())
    assert report["repeats"] == 1 and report["improved_config"]["members"] == 2
    names = [m["model"] for m in report["models"]]
    assert names == ["article MLP", "improved MLP", "LinearRegression", "RandomForest", "GradientBoosting"]
    for m in report["models"]:
        assert m["features"] == "without B" and m["rmse_std"] == 0.0
        assert m["rmse_mean"] == pytest.approx(m["rmse"][0]) and m["rmse_mean"] > 0
    gb = report["models"][-1]["rmse_mean"]
    improved = report["models"][1]["rmse_mean"]
    assert report["ratio_improved_to_gradient_boosting"]["without B"] == pytest.approx(improved / gb)
    assert not list(tmp_path.glob("*.tmp"))


def test_default_runs_with_and_without_b(tmp_path, capsys):
    out = tmp_path / "both.json"
    assert main(["evaluate", *FAST, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "with B" in text and "without B" in text
    report = json.loads(out.read_text())
    features = [m["features"] for m in report["models"]]
    assert features == ["with B"] * 5 + ["without B"] * 5
    assert "Paired on the same splits" in text and "article MLP without B - article MLP with B" in text
    paired = report["paired"]
    assert list(paired) == ["models, with B", "models, without B", "without B vs with B"]
    assert [len(v) for v in paired.values()] == [4, 4, 5]
    gb = [m for m in report["models"] if m["model"] == "GradientBoosting" and m["features"] == "with B"][0]
    linear = [m for m in report["models"] if m["model"] == "LinearRegression" and m["features"] == "with B"][0]
    row = [r for r in paired["models, with B"] if r["a"] == "LinearRegression"][0]
    assert row["b"] == "GradientBoosting" and row["differences"] == pytest.approx([linear["rmse"][0] - gb["rmse"][0]])
    assert row["low"] is None  # one split: no interval
