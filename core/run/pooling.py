"""What a pooling model runs: the engine requests of a score or rerank request on a
cross-encoder (one per pair, made by vLLM's own processor), and the gathering of a
request's vectors or pair scores as its engine requests finish."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from core.check.engine_requests import PooledRequest, ScoreRequest
from core.run.outputs import Embeddings


def pair_requests(
    llm: Any, request: PooledRequest, key: str, name: str
) -> list[tuple[str, Any, Any]]:
    """One engine request per (query, document) pair of a score or rerank request on a
    cross-encoder, made by vLLM's own cross-encoder processor as ``LLM.score`` makes
    them: the pair tokenized together (``[CLS] query [SEP] document [SEP]`` and its
    token type ids for BERT), pooled by the model's classifier. ``name`` is the model's,
    for messages.

    Raises:
        ValueError: an embeddings request (a cross-encoder makes no vectors), or a pair
            vLLM refuses (e.g. longer than the model takes).
    """
    if not isinstance(request, ScoreRequest):
        raise ValueError(
            f"{name} is a cross-encoder: it scores pairs of texts and makes no vectors; "
            "this request needs an embedding model"
        )
    from vllm.entrypoints.pooling.typing import OfflineScoringInputsContext
    from vllm.pooling_params import PoolingParams

    processor = llm.pooling_io_processors["cross-encoder"]
    inputs = list(request.inputs)
    data = processor.valid_inputs(inputs[: request.queries], inputs[request.queries :])
    context = OfflineScoringInputsContext(
        pooling_task=processor.pooling_task,
        tokenization_kwargs=None,
        lora_request=None,
        priorities=None,
        scoring_data=data,
        chat_template=None,
        pooling_params=PoolingParams(task=processor.pooling_task),
    )
    factory, _ = processor.get_request_factory_offline(context)
    parts = []
    for index, params in enumerate(factory()):
        rendered = processor.render(params)
        parts.append((f"{key}.{index}", rendered["prompts"], rendered["params"]))
    return parts


@dataclass
class Gathering:
    """The vectors of one embeddings request as its inputs finish, or the scores of a
    score or rerank request's pairs on a cross-encoder."""

    values: list[Any]
    left: int  # inputs (or pairs) still in the engine
    tokens: int = 0
    scores: bool = False  # pairs scored by a cross-encoder, not vectors

    def add(self, index: int, output: Any) -> Embeddings | None:
        """Keeps one input's vector (or pair's score); returns the whole result once every
        one is in."""
        if self.scores:
            from vllm.outputs import ScoringOutput

            self.values[index] = ScoringOutput.from_base(output.outputs).score
        else:
            self.values[index] = np.asarray(output.outputs.data.tolist(), dtype=np.float32)
        self.tokens += len(output.prompt_token_ids or ())
        self.left -= 1
        if self.left:
            return None
        if self.scores:
            return Embeddings(self.tokens, [], scores=self.values)
        return Embeddings(self.tokens, self.values)
