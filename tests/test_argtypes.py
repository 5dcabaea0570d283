"""The argparse types every command line shares: good text gives its value, bad text one line naming it."""

import argparse

import pytest

from gpulab import argtypes

GOOD = [(argtypes.positive_int, "3", 3), (argtypes.non_negative_int, "0", 0), (argtypes.positive_float, "2.5", 2.5),
        (argtypes.non_negative_float, "0", 0.0), (argtypes.count, "7e9", 7_000_000_000),
        (argtypes.int_list, "512,1", [512, 1]),
        (argtypes.one_or_more_of(("sweep", "ddp"), "parts"), "ddp, sweep,ddp", ["ddp", "sweep"]),
        (argtypes.port, "29500", 29500)]
BAD = [(argtypes.positive_int, "0", "positive integer"), (argtypes.positive_int, "1.5", "not an integer"),
       (argtypes.non_negative_int, "-1", "0 or more"), (argtypes.positive_float, "0", "positive number"),
       (argtypes.positive_float, "inf", "positive number"), (argtypes.positive_float, "nan", "positive number"),
       (argtypes.non_negative_float, "-0.5", "0 or more"), (argtypes.non_negative_float, "x", "not a number"),
       (argtypes.count, "1.5", "whole number"), (argtypes.int_list, "4,0", "positive integers"),
       (argtypes.one_or_more_of(("sweep", "ddp"), "parts"), "sweep,fsdp", "comma-separated list of sweep, ddp"),
       (argtypes.one_or_more_of(("sweep", "ddp"), "parts"), " , ", "comma-separated list of sweep, ddp"),
       (argtypes.port, "65536", "port in 1..65535"), (argtypes.port, "80x", "not an integer")]


@pytest.mark.parametrize("kind,text,value", GOOD)
def test_good_text_gives_its_value(kind, text, value):
    assert kind(text) == value


@pytest.mark.parametrize("kind,text,message", BAD)
def test_bad_text_names_itself_and_what_is_valid(kind, text, message):
    with pytest.raises(argparse.ArgumentTypeError) as error:
        kind(text)
    assert repr(text) in str(error.value) and message in str(error.value) and "\n" not in str(error.value)
