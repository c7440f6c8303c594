"""engine/pressure.py on hand-built entries: which running requests keep their place when KV
runs short, how much compression frees, and the predicted footprint under admission control."""

import jax.numpy as jnp
from toy import config, entries, running

from servetune.engine.pressure import compress_tail, footprint, keep_prefix

CFG = config()  # 4-token blocks, max_model_len 64


def _a(values, dtype=jnp.int32):
    return jnp.asarray(values, dtype)


def test_the_longest_prefix_whose_growth_fits_keeps_running():
    run = _a([True, True, True], bool)
    held = _a([3, 3, 3])
    # each wants one block; 1 free: the first takes it, the second needs the third's blocks
    # (1 + 1 - 3 <= 1 after it gives up its 3), the third would need one more than is left
    assert keep_prefix(run, _a([1, 1, 1]), held, 1).tolist() == [True, True, False]
    assert keep_prefix(run, _a([1, 1, 1]), held, 3).tolist() == [True, True, True]
    # nothing free: the first still keeps running on the 6 blocks the two after it give up
    assert keep_prefix(run, _a([5, 0, 0]), held, 0).tolist() == [True, False, False]


def test_compression_takes_the_fewest_lowest_priority_requests_that_cover_the_deficit():
    cfg = config(kv_pressure="compress")
    e = entries(cfg, [running(32, 8), running(32, 8), running(32, 8)])  # 8 blocks each
    run = jnp.arange(cfg.n_entries) < 3
    alloc = _a([1, 1, 1] + [0] * 5)  # each computes one more token: 33 tokens, a 9th block
    held = e.blocks
    grow = _a([1, 1, 1] + [0] * 5)
    # 2 blocks free, 3 wanted: deficit 1. Compressed 2x, 33 tokens take ceil(33/2) = 17
    # tokens, 5 blocks: 4 saved by the last one alone
    compress, new_grow = compress_tail(e, run, alloc, grow, held, 2, 2.0, cfg)
    assert compress.tolist()[:3] == [False, False, True]
    assert new_grow.tolist()[:3] == [1, 1, 5 - 8]
    none, same = compress_tail(e, run, alloc, grow, held, 3, 2.0, cfg)  # no deficit
    assert not none.any() and same.tolist()[:3] == [1, 1, 1]


def test_the_footprint_is_prompt_plus_predicted_output_capped_at_max_model_len():
    e = entries(
        CFG,
        [
            {"prompt": 10, "output": 20, "predicted": 5.2},  # 10 + ceil(5.2) = 16: 4 blocks
            running(10, 20, generated=8, predicted=5.0),  # past its prediction: 10 + 9 = 19: 5
            {"prompt": 10, "output": 20, "predicted": 1e300},  # capped at 64 tokens: 16 blocks
            {"prompt": 10, "output": 20, "predicted": 3e9},  # beyond int32: still 16, not wrapped
        ],
    )
    assert footprint(e, CFG).tolist()[:4] == [4, 5, 16, 16]


def test_the_footprint_cannot_wrap_whatever_max_model_len_is():
    # max_model_len at int32's largest: prompt + a prediction clipped at max_model_len alone
    # would pass 2**31; the prediction is clipped to the room the prompt leaves
    cfg = config(max_model_len=2**31 - 1, block_size=16)
    e = entries(
        cfg,
        [
            {"prompt": 10**7, "output": 20, "predicted": 3e9},
            {"prompt": 10**7, "output": 20, "predicted": 1e300},
            {"prompt": 10**7, "output": 20, "predicted": 2**31 - 10**7 - 1.0},
        ],
    )
    whole = -(-(2**31 - 1) // 16)  # blocks of a max_model_len sequence
    assert footprint(e, cfg).tolist()[:3] == [whole] * 3
