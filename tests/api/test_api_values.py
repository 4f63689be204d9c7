"""The API refuses a wrong value as the CLI refuses a wrong flag: one CaffememError naming
the value and what it may be, never a KeyError, ValueError or TypeError from deep inside a
pass (issue 31, item 16)."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

import caffemem
from caffemem import CaffememError, FitRequest, OptimizeSettings, Options

LENET = str(FIXTURES / "examples" / "lenet_train.prototxt")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"dtype": "bogus"}, "dtype 'bogus': expected one of float32, float16, float64"),
        ({"phase": "BOGUS"}, "phase 'BOGUS': expected TRAIN, TEST or None (the net's own default)"),
        ({"level": 2**40}, "level 1099511627776: expected a whole number from -2147483648 to 2147483647, or None"),
        ({"level": True}, "level True: expected a whole number from -2147483648 to 2147483647, or None"),
        ({"device": "tpu"}, "device 'tpu': expected one of cpu, gpu"),
        ({"engine": "CUDNN"}, "engine 'CUDNN': expected one of caffe, cudnn, or None (the build's default)"),
        ({"batch": 0}, "batch 0: expected a whole number from 1 to 2147483647, or None"),
        ({"gpus": 0}, "gpus 0: expected a whole number from 1 to 65536"),
        ({"stages": [1]}, "stages [1]: expected a list of stage names"),
        ({"overrides": "data"}, "overrides 'data': expected a set of input names"),
        ({"inputs": {"data": (64, 1.5)}}, "inputs: data's shape (64, 1.5): expected whole numbers from 0 to 2147483647 (or -1, the file's own value), e.g. (64, 1, 28, 28) or \"64,1,28,28\""),
        ({"inputs": {"data": "64,x"}}, "--input 'data=64,x': expected NAME=d0,d1,... with whole numbers from 0 to 2147483647 or _ (the file's own value), e.g. data=1,3,224,224 or data=_,3,_,_"),
        ({"layers_file": 5}, "layers_file 5: expected a path, or None"),
        ({"caffe_root": 5}, "caffe_root 5: expected a path, or None"),
        ({"lenient": "yes"}, "lenient 'yes': expected True or False"),
        ({"inputs": ["data"]}, "inputs ['data']: expected a mapping of blob name to shape, e.g. {'data': (64, 1, 28, 28)}"),
    ],
)
def test_a_wrong_option_is_a_caffemem_error_naming_it(values, message):
    with pytest.raises(CaffememError) as refused:
        Options(**values)
    assert refused.value.message == message


def test_an_input_given_as_text_reads_as_the_flag_does():
    # {"data": "64,1,28,28"} raised TypeError in the shape pass; it is the --input spelling.
    assert Options(inputs={"data": "64,1,28,28", "label": "_"}).inputs == {"data": (64, 1, 28, 28), "label": (-1,)}
    assert caffemem.analyze(LENET, Options(phase="train")).nets[0].phase == "TRAIN"


def test_the_keyword_inputs_of_a_library_call_read_as_options_does():
    with pytest.raises(CaffememError) as refused:
        caffemem.analyze(LENET, inputs={"data": (64, "x")})
    assert refused.value.message.startswith("inputs: data's shape (64, 'x'): expected whole numbers")
    assert caffemem.analyze(LENET, Options(phase="TEST"), inputs={"data": "_,1,28,28"}).nets[0].shaped.blob_shapes["data"] == (64, 1, 28, 28)


def test_a_stage_given_as_one_string_is_one_stage():
    assert Options(stages="deploy").stages == ("deploy",)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"strategy": "bogus"}, "strategy 'bogus': expected one of auto, fork, "),
        ({"strategy": "fork", "recompute": "sqrt"}, "--recompute is run by caffemem's patched Caffe from its own table: it cannot go with --strategy fork"),
        ({"exclude": [3]}, "exclude [3]: expected a list of blob names"),
        ({"recompute": 5}, "recompute 5: expected a policy (\"cheap\", \"sqrt\", \"budget=6GiB\"), or None"),
        ({"share_buffers": "yes"}, "share_buffers 'yes': expected True or False"),
    ],
)
def test_a_wrong_optimize_setting_is_a_caffemem_error(values, message):
    # strategy="bogus" gave "no safe plan found ()"; "fork" with recompute was accepted.
    with pytest.raises(CaffememError) as refused:
        OptimizeSettings(**values)
    assert refused.value.message.startswith(message)


@pytest.mark.parametrize("values", [{"gpu_memory": "12GiB"}, {"gpu_memory": 0}, {"gpu_memory": 2**30, "gpus": 0}, {"gpu_memory": 2**30, "reserve": -1}])
def test_a_wrong_fit_request_is_a_caffemem_error(values):
    with pytest.raises(CaffememError):
        FitRequest(**values)


def test_check_file_of_something_not_a_path_is_a_caffemem_error():
    from caffemem.api import CheckSettings, check_file

    with pytest.raises(CaffememError) as refused:
        check_file(5, CheckSettings())
    assert refused.value.message == "check_file: 5 is not a path"


def test_verify_of_a_plan_file_not_a_path_is_a_caffemem_error():
    with pytest.raises(CaffememError) as refused:
        caffemem.verify(LENET, 5)
    assert refused.value.message.startswith("plan_file 5: expected a path")


def test_a_location_whose_file_is_a_path_object_still_describes_itself(tmp_path):
    from caffemem import Location

    assert str(CaffememError("bad", Location(file=tmp_path / "net.prototxt", line=3))) == f"{tmp_path / 'net.prototxt'}:3: bad"
