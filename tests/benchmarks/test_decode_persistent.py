"""The persistent decode experiment (benchmarks/kernels/decode_persistent.py) off the GPU: both its kernels agree
with ``flash_attn_with_kvcache`` in Triton's interpreter, the check catches a kernel that does not, and the TTGIR
reading that says whether the loops were fused. (The timing needs a GPU.)"""

import pytest
import torch

from benchmarks.kernels import decode_persistent as exp
from flashdoc.kernels import decode as dk

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # on the CPU the kernels run in Triton's interpreter


def test_kernel_agrees_with_the_api():
    assert exp.check(DEVICE) == 0


def test_kernels_agree_over_the_gpu_check_tiles():
    """The check the timing runs first on a GPU: 128-key tiles, each item spanning several."""
    assert exp.check(DEVICE, config=dk.DecodeConfig(128, 8, 3, 1)) == 0


def test_check_catches_a_wrong_kernel(monkeypatch):
    """Keys left out of the last sequence: every case of both kernels must fail. On the CPU (fp32, tolerance
    2e-5) one key fewer shows; on a GPU the check runs in bf16 with a tolerance of 2e-2, under which one key of the
    hundred or more in those sequences moves the output too little, so half of them go missing there."""
    right = exp.persistent_call

    def keys_short(q, k_cache, v_cache, seqlens, config, sms, walk):
        last = torch.arange(len(seqlens), device=seqlens.device) == len(seqlens) - 1
        missing = 1 if DEVICE == "cpu" else seqlens // 2
        return right(q, k_cache, v_cache, seqlens - last.int() * missing, config, sms, walk)

    monkeypatch.setattr(exp, "persistent_call", keys_short)
    assert exp.check(DEVICE) == 2 * 3


def test_refuses_a_shape_that_is_not_a_decode_step():
    q = torch.zeros(1, 64, 8, 32, device=DEVICE)
    cache = torch.zeros(1, 64, 2, 32, device=DEVICE)
    with pytest.raises(ValueError, match="not a decode step"):
        exp.persistent_call(
            q, cache, cache, torch.zeros(1, dtype=torch.int32, device=DEVICE), exp.parse_config("32,4,2,1"), 1
        )


def test_refuses_strides_the_kernels_do_not_take_and_an_empty_batch():
    config = exp.parse_config("32,4,2,1")
    cache = torch.zeros(1, 64, 2, 32, device=DEVICE)
    seqlens = torch.zeros(1, dtype=torch.int32, device=DEVICE)
    q = torch.zeros(1, 1, 32, 8, device=DEVICE).transpose(2, 3)  # (1, 1, 8, 32), head dim stride 8
    with pytest.raises(ValueError, match="q's head dim must have stride 1, got 8"):
        exp.persistent_call(q, cache, cache, seqlens, config, 1)
    with pytest.raises(ValueError, match="q has batch 0"):
        exp.persistent_call(torch.zeros(0, 1, 8, 32, device=DEVICE), cache[:0], cache[:0], seqlens[:0], config, 1)


def test_parse_config():
    assert exp.parse_config("128,8,2,3") == dk.DecodeConfig(block_n=128, warps=8, stages=2, programs_per_sm=3)


TTGIR = """\
  tt.func public @k() {
    %0 = scf.if %a -> (i32) {
      %1 = scf.for %i = %c0 to %n step %c1 iter_args(%x = %c0) -> (i32) : i32 {
        scf.yield %x : i32
      }
    }
    %2:3 = scf.for %j = %c0 to %m step %c1 iter_args(%t = %a, %u = %b) -> (!ttg.async.token, !ttg.async.token) : i32 {
      %3 = scf.for %k = %c0 to %m step %c1 iter_args(%y = %c0) -> (i32) : i32 {
        scf.yield %y : i32
      }
      scf.yield %t, %u : !ttg.async.token, !ttg.async.token
    }
  }
"""


def test_describe_loops_reads_nesting_and_loads_in_flight():
    assert exp.describe_loops(TTGIR) == [
        "top-level loop carrying 0 async loads",
        "top-level loop carrying 2 async loads",
        "nested loop carrying 0 async loads",
    ]


def test_timing_refuses_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a GPU"):
        exp.main([])
