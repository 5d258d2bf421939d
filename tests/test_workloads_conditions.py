"""The public condition readers: what a factory makes of ``--set`` text."""

from __future__ import annotations

import pytest

from mlflow_perfgate.workloads import choice, flag, integer, number, shape


@pytest.mark.parametrize(("value", "expected"), [
    ("false", False), ("False", False), ("0", False), ("no", False), ("off", False), (False, False), (0, False),
    ("true", True), (" TRUE ", True), ("1", True), ("yes", True), ("on", True), (True, True), (1, True),
])
def test_flag_reads_text_as_a_boolean(value, expected):
    assert flag({"checkpoint": value}, "checkpoint", not expected) is expected


def test_flag_default_when_absent_or_none():
    assert flag({}, "checkpoint", True) is True
    assert flag({"checkpoint": None}, "checkpoint", False) is False


@pytest.mark.parametrize("value", ["maybe", 2, "", 0.5])
def test_flag_refuses_what_is_no_boolean(value):
    with pytest.raises(ValueError, match=r"checkpoint must be a boolean .*got"):
        flag({"checkpoint": value}, "checkpoint", False)


@pytest.mark.parametrize(("value", "expected"), [
    ("4,64", (4, 64)), ("(4, 64)", (4, 64)), ("[4,64]", (4, 64)), ("4x64", (4, 64)), ((4, 64), (4, 64)),
    ([4, 64], (4, 64)),
])
def test_shape_reads_text_as_a_tuple(value, expected):
    assert shape({"input_shape": value}, "input_shape", (2, 16)) == expected


def test_shape_default_and_ndim():
    assert shape({}, "input_shape", [2, 16]) == (2, 16)
    assert shape({"s": "1,2,3"}, "s", ndim=3) == (1, 2, 3)
    assert shape({}, "s", None, ndim=3) is None
    with pytest.raises(ValueError, match=r"input_shape must be 2 positive integers"):
        shape({"input_shape": "4,0"}, "input_shape", (2, 16))
    with pytest.raises(ValueError, match=r"input_shape must be 2 positive integers"):
        shape({"input_shape": "4,64,2"}, "input_shape", (2, 16))
    with pytest.raises(TypeError, match="needs ndim"):
        shape({"s": "1,2"}, "s")


def test_integer_and_its_minimum():
    assert integer({"n_layer": "4"}, "n_layer", 2, minimum=1) == 4
    assert integer({"n_layer": 4.0}, "n_layer", 2) == 4
    assert integer({}, "n_layer", 2) == 2
    assert integer({}, "steps") is None
    for bad in ("0", "four", True, 2.5):
        with pytest.raises(ValueError, match=r"n_layer must be an integer >= 1"):
            integer({"n_layer": bad}, "n_layer", 2, minimum=1)


def test_number_reads_floats():
    assert number({"lr": "3e-4"}, "lr", 1e-3, minimum=0, strict=True) == pytest.approx(3e-4)
    assert number({"lr": 2}, "lr", 1e-3) == 2.0
    assert number({}, "lr", 1e-3) == 1e-3
    for bad in ("0", "nan", "inf", "fast", True):
        with pytest.raises(ValueError, match=r"lr must be a finite number > 0"):
            number({"lr": bad}, "lr", 1e-3, minimum=0, strict=True)


def test_choice_is_case_insensitive_and_maps_aliases():
    assert choice({"dtype": "BF16"}, "dtype", "fp32", ["fp32", "bf16"]) == "bf16"
    assert choice({"dtype": "bfloat16"}, "dtype", "fp32", {"bfloat16": "bf16", "bf16": "bf16", "fp32": "fp32"}) == "bf16"
    assert choice({}, "dtype", "fp32", ["fp32", "bf16"]) == "fp32"
    with pytest.raises(ValueError, match=r"dtype must be one of \['bf16', 'fp32'\], got 'fp16'"):
        choice({"dtype": "fp16"}, "dtype", "fp32", ["fp32", "bf16"])


def test_conditions_must_be_a_dict():
    with pytest.raises(TypeError, match="conditions must be a dict"):
        flag(["checkpoint"], "checkpoint", False)


def test_documented_examples_hold():
    import doctest

    from mlflow_perfgate.workloads import _conditions

    failures, tried = doctest.testmod(_conditions)
    assert tried >= 6 and failures == 0
