"""The faithfulness scoreboard: for every head, how far four accounts of "which keys does this head's query
draw on" agree with each other, and with an intervention that removes one key's contribution and measures
what the output loses.

For head h of block l and a query token i (or every query at once), each key j gets:
- weights: α_ij, the attention weight;
- norm: α_ij ‖f_h(x_j)‖, the norm-weighted attention (Kobayashi et al. 2020);
- alti: ALTI's c_ij of block l (Ferrando et al. 2022), which measures a block as a whole: the same for every
  head of the block;
- gradient: |∇F · α_ij v_j|, the output's gradient at the head's context (its slice of W_O's input) times
  key j's part of that context (gradient × input, Shrikumar et al. 2017, at the head's context): the first-order
  estimate of the intervention;
- intervention: |F(A) − F(A with α_ij v_j taken out of head h's context at query i)|, the output run again
  without that one contribution (activation patching's "remove" variant, as app.engine.patch_sites puts values
  at the same site).
Averaged over every query, the accounts are their means over the queries, and the intervention takes key j's
contribution out at every query of the head at once (the gradient account: the sum of its first-order terms).

The output F is the one Integrated Gradients explains (app.engine.attribution): an encoder's sentence vector's
cosine with a second sentence's, a decoder's logit of A's most likely next token after its last token. Each
head's accounts are compared by Spearman's ρ over the keys its query can see (every key when averaged).

The removals run in float32, whose F is resolved to about |F|·ε₃₂ (ε₃₂ = 2⁻²³): a key whose true effect is
1e-16 reported a few of those roundings (1e-7), and ranked among the others it moved ρ (MiniLM, query 3 of
tests/test_scoreboard.py's text: block 0, head 2's weights read 0.80 where the exact ρ is 0.96). An effect
under resolution(F) = ROUNDINGS·|F|·ε₃₂ is therefore run again in float64, on a copy of the model's own numbers
upcast to float64 (app.engine.model.upcast: twice its float32 weights, for the time of the scoreboard), and ρ ranks
those exact effects. ROUNDINGS = 64: a float32 effect of MiniLM was off by at most 4.2 |F|·ε₃₂ over its 504
removals of one query, so an effect kept from float32 is at least 16 times its own rounding, and two such
effects swap ranks only where they are within that rounding.

A bfloat16 or float16 model's removals and gradient are computed on its float32 copy (its own weights upcast,
app.engine.model.upcast), from that copy's own pass of the text: bfloat16 resolves F to |F|·2⁻⁸, and a
contribution read from the bfloat16 run differs from the one the float32 pass put in by about as much. Its
weights, norm and ALTI accounts are the run's, upcast, as every view reads them.
"""

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import combinations

import torch
from torch import Tensor
from transformers import PreTrainedModel

from app.engine import names
from app.engine.capture import model_inputs, on_cpu, thread_hooks
from app.engine.engine import BATCH_TOKENS, Engine, sequence
from app.engine.errors import InvalidInput
from app.engine.model import upcast, upcast_bytes
from app.engine.patch_sites import changing_input, site_module
from app.engine.placement import dtype_name
from app.engine.runs import Run
from app.engine.sentence import SentencePipeline
from app.engine.spec import RunSpec

ACCOUNTS = ("weights", "norm", "alti", "gradient")
PAIRS = tuple(f"{a}:{b}" for a, b in combinations(ACCOUNTS, 2))
GRADIENT = "|∇F · α_ij v_j|: the output's gradient at the head's context times key j's part of it (first order)"
INTERVENTION = "|F(A) − F(A without α_ij v_j in head h's context at query i)|: what the output loses, run again"
METHOD = (
    "an effect under least_float32_effect (roundings·|F|·ε₃₂), which a float32 pass cannot tell from rounding, is "
    "run again with the model in float64, and ρ ranks that exact effect"
)
MIN_KEYS = 3  # a rank correlation over fewer keys says little
ROUNDINGS = 64  # an effect under ROUNDINGS·|F|·ε₃₂ is run again in float64 (the module's docstring says why)
EPS32 = torch.finfo(torch.float32).eps


@dataclass(frozen=True)
class Removal:
    """Key `key`'s contribution through head `head` of block `layer` taken out at A's `queries`: delta
    [query, d_head] is subtracted from the head's context there."""

    layer: int
    head: int
    key: int
    queries: tuple[int, ...]
    delta: Tensor


def keys_of(spec: RunSpec, n: int, query: int | None) -> list[int]:
    """The keys the query can see (every key for every query at once)."""
    if query is None:
        return list(range(n))
    return list(range(query + 1)) if spec.mask == "causal" else list(range(n))


def scoreboard_bytes(engine: Engine, tokens: int) -> int:
    """The scoreboard's peak memory, stated before it starts: its gradient pass, a padded pass of removals, and
    where the model is in half precision its float32 copy and the copy's run of the text."""
    footprint = engine.footprint
    nbytes = footprint.backward_bytes(1, tokens) + footprint.transient_bytes(BATCH_TOKENS // tokens + 1, tokens)
    if upcast_bytes(engine.loaded):
        nbytes += upcast_bytes(engine.loaded) + footprint.run_bytes(tokens)
    return nbytes


def check(engine: Engine, spec: RunSpec, query: int | None, other: str | None, max_cost: int | None) -> None:
    """The request checked before any pass: its query, its target and its cost, (rows + 1) × tokens with a
    row per head and key."""
    loaded = engine.loaded
    if loaded.family.attention_only:
        raise InvalidInput(f"no head's contributions can be taken out: {engine.info['attention_only']}")
    if spec.text_pair is not None:
        raise InvalidInput("the scoreboard reads one text, not a sentence pair")
    if not loaded.family.decoder and other is None:
        raise InvalidInput("an encoder's output here is its similarity to a second sentence: give `other`")
    if loaded.family.decoder and other is not None:
        raise InvalidInput("a decoder's output here is its next-token logit: give no `other`")
    n = engine.length(spec)
    if not loaded.family.decoder and n > loaded.max_seq_length:
        raise InvalidInput(f"the text has {n} tokens and the model's pooling reads {loaded.max_seq_length}: shorten it")
    if query is not None and not 0 <= query < n:
        raise InvalidInput(f"token {query} does not exist: tokens are 0 to {n - 1}")
    keys = keys_of(spec, n, query)
    if len(keys) < MIN_KEYS:
        raise InvalidInput(f"token {query} sees {len(keys)} keys: ranks need at least {MIN_KEYS}; ask a later token")
    config = loaded.model.config
    rows = config.num_hidden_layers * config.num_attention_heads * len(keys)
    cost = (rows + 1) * n
    if max_cost is not None and cost > max_cost:
        raise InvalidInput(
            f"the scoreboard runs A once per head and key: ({rows:,} + 1) × {n} tokens = {cost:,} is past this "
            f"lab's bound of {max_cost:,}; ask one query token, or a shorter text"
        )


def spearman(a: Tensor, b: Tensor) -> float | None:
    """Spearman's ρ (Pearson's correlation of the ranks, ties sharing their mean rank); None where either
    side is constant."""
    from scipy.stats import rankdata  # imported here: scipy.stats would lengthen every start of the lab

    x, y = (torch.from_numpy(rankdata(values.double().numpy())) for values in (a, b))
    x, y = x - x.mean(), y - y.mean()
    scale = (x.norm() * y.norm()).item()
    return None if scale == 0 else float((x @ y) / scale)


def resolution(value: float) -> float:
    """The least effect on F = `value` kept from a float32 pass: ROUNDINGS·|F|·ε₃₂."""
    return ROUNDINGS * abs(value) * EPS32


def in_float64(loaded) -> tuple[torch.nn.Module, SentencePipeline]:
    """The model and its sentence pipeline in float64, on the model's device: the model's own numbers upcast
    (app.engine.model.upcast), its Dense steps' weights upcast."""
    model = upcast(loaded, torch.float64)
    return model.eval(), loaded.pipeline.to(model.device, torch.float64)


@contextmanager
def removing(model: torch.nn.Module, family, removals: list[Removal], first_row: int) -> Iterator[None]:
    """Hooks at W_O's input that take removal i's delta out of row first_row + i, during passes of the thread
    that set them; always removed."""
    n_heads = model.config.num_attention_heads
    by_layer: dict[int, list[tuple[int, Removal]]] = {}
    for index, removal in enumerate(removals):
        by_layer.setdefault(removal.layer, []).append((first_row + index, removal))

    def take(value: Tensor, rows: list[tuple[int, Removal]]) -> Tensor:
        heads = value.unflatten(-1, (n_heads, -1)).clone()  # [batch, pos, head, d_head]
        for row, removal in rows:
            heads[row, list(removal.queries), removal.head] -= removal.delta.to(heads)  # the pass's device and dtype
        return heads.flatten(-2)

    with thread_hooks() as hook:
        for layer, rows in by_layer.items():
            change = functools.partial(take, rows=rows)
            hook(site_module(model, family, "head", layer), changing_input(change), before=True, with_kwargs=True)
        yield


def scoreboard_slices(
    engine: Engine,
    run: Run,
    accounts: dict[str, list[Tensor]],
    query: int | None,
    other: str | None,
    float32: tuple[PreTrainedModel, Run] | None = None,
) -> list[Callable[[], dict | None]]:
    """The scoreboard of a run in slices to run one after another, the last of which returns it: first the
    output and its gradient at every head's context (one pass forward and back), then A run again without
    each head's key's contribution, in padded passes of at most BATCH_TOKENS tokens.
    accounts: the run's weights, norm and alti, [head (or 1), query, key] per block. `float32`: for a bfloat16 or
    float16 model, its float32 copy (app.engine.model.upcast) and that copy's run of the same text: the passes
    are the copy's, and take out its own contributions α_ij v_j and read its next token (the run's own
    contributions differ from what the copy's pass put in by their rounding, which a removal would leave in)."""
    loaded = engine.loaded
    model, passes = float32 or (loaded.model, run)
    family = loaded.family
    n_layers, n_heads, n = run.n_layers, run.n_heads, len(run.tokens)
    keys = keys_of(run.spec, n, query)
    a = sequence(run.spec, run.tokens)
    pipeline = loaded.pipeline.to(model.device)
    work: dict = {}

    def output(inputs: dict, model=model, pipeline=pipeline) -> Tensor:
        """F for every row of a padded pass of A, by `model` and `pipeline` (the served ones, or float64's): [batch]."""
        if family.decoder:
            return model(**inputs).logits[:, n - 1, work["token"]]
        hidden = model.base_model(**inputs).last_hidden_state
        vectors = torch.stack([pipeline.stages(rows, run.spec.pooling)[-1].vector for rows in hidden])
        return torch.nn.functional.cosine_similarity(vectors, work["other"][None].to(vectors.dtype), dim=-1)

    def begin() -> None:
        """F(A) and its gradient at each block's context, [pos, head, d_head], through zeros added there."""
        if family.decoder:
            work["token"] = int(passes.next_tokens[0][n - 1, 0])
        else:
            others, _ = engine.tokenize(other, None, loaded.max_seq_length)
            with torch.inference_mode():
                hidden = model.base_model(**model_inputs(model, family, [sequence(run.spec, others)]))
            work["other"] = pipeline.stages(hidden.last_hidden_state[0], run.spec.pooling)[-1].vector.clone()
        zeros, handles = [], []
        try:
            for layer in range(n_layers):
                module = site_module(model, family, "head", layer)
                # W_O's input width: a Linear keeps [out, in], GPT-2's Conv1D [in, out].
                width = module.in_features if isinstance(module, torch.nn.Linear) else module.weight.shape[0]
                zero = torch.zeros(1, n, width, device=model.device, requires_grad=True)
                zeros.append(zero)

                def add(module, args, kwargs, zero=zero):
                    if args:
                        return (args[0] + zero, *args[1:]), kwargs
                    return args, {**kwargs, "hidden_states": kwargs["hidden_states"] + zero}

                handles.append(module.register_forward_pre_hook(add, with_kwargs=True))
            with torch.enable_grad():
                value = output(model_inputs(model, family, [a]))[0]
                gradients = torch.autograd.grad(value, zeros)
        finally:
            for handle in handles:
                handle.remove()
        work["value"] = float(value.detach())
        # [head, pos, d_head] per block
        work["gradient"] = [on_cpu(g[0]).unflatten(-1, (n_heads, -1)).transpose(0, 1).double() for g in gradients]

    removals = []
    for layer in range(n_layers):
        weights = accounts["weights"][layer] if passes is run else passes.weights(layer)  # [head, query, key]
        values = passes.activations[names.attn(layer, "v")]  # [head, pos, d_head]
        for head in range(n_heads):
            queries = tuple(range(n)) if query is None else (query,)
            for key in keys:
                delta = weights[head, list(queries), key, None] * values[head, key]  # [query, d_head]
                removals.append(Removal(layer, head, key, queries, delta))
    effects: list[float] = []
    exact: set[int] = set()  # the removals whose effect was run again in float64
    per_pass = max(1, BATCH_TOKENS // n - 1)

    def effects_of(chunk: list[Removal], model: torch.nn.Module, pipeline: SentencePipeline) -> list[float]:
        """|F(A) − F(A without each removal)|, A itself the first row of the pass."""
        with removing(model, family, chunk, first_row=1):
            out = output(model_inputs(model, family, [a] * (len(chunk) + 1)), model, pipeline).double()
        return (out[0] - out[1:]).abs().tolist()

    def remove(chunk: list[Removal]) -> Callable[[], None]:
        """A chunk's removals in float32, then those under float32's resolution of F again in float64."""

        @torch.inference_mode()
        def compute() -> None:
            first = len(effects)
            effects.extend(effects_of(chunk, model, pipeline))
            below = [at for at in range(first, len(effects)) if effects[at] < resolution(work["value"])]
            if below:
                if "float64" not in work:
                    work["float64"] = in_float64(loaded)
                again = effects_of([removals[at] for at in below], *work["float64"])
                for at, effect in zip(below, again, strict=True):
                    effects[at] = effect
                exact.update(below)

        return compute

    def answer() -> dict:
        work.pop("float64", None)  # the float64 model's memory back before the answer is built
        parts = []  # per removal, its first-order term |∇F · Σ_i α_ij v_j|
        for removal in removals:
            gradient = work["gradient"][removal.layer][removal.head, list(removal.queries)]  # [query, d_head]
            parts.append(abs(float((gradient * removal.delta.double()).sum())))
        index = torch.arange(len(removals)).view(n_layers, n_heads, len(keys))
        effect, part = torch.tensor(effects, dtype=torch.float64), torch.tensor(parts, dtype=torch.float64)
        rows = list(range(n)) if query is None else [query]
        heads = []
        for layer in range(n_layers):
            alti = accounts["alti"][layer][0, rows][:, keys].double().mean(0)
            for head in range(n_heads):
                at = index[layer, head]
                rerun = [position for position, removal in enumerate(at.tolist()) if removal in exact]
                measured = {
                    "weights": accounts["weights"][layer][head, rows][:, keys].double().mean(0),
                    "norm": accounts["norm"][layer][head, rows][:, keys].double().mean(0),
                    "alti": alti,
                    "gradient": part[at],
                }
                heads.append(
                    {
                        "layer": layer,
                        "head": head,
                        "values": {name: v.tolist() for name, v in {**measured, "intervention": effect[at]}.items()},
                        "correlations": {
                            f"{x}:{y}": spearman(measured[x], measured[y]) for x, y in combinations(ACCOUNTS, 2)
                        },
                        "agreement": {name: spearman(measured[name], effect[at]) for name in ACCOUNTS},
                        "float64": rerun,
                    }
                )
        target = (
            {"kind": "next_token", "token_id": work["token"], "token": engine.pieces([work["token"]])[0]}
            if family.decoder
            else {"kind": "similarity", "other": other}
        )
        return {
            "run_id": run.run_id,
            "computed_in": dtype_name(model.dtype),
            "model_dtype": loaded.dtype,
            "tokens": run.tokens,
            "query": query,
            "keys": keys,
            "target": {**target, "value": work["value"]},
            "accounts": list(ACCOUNTS),
            "pairs": list(PAIRS),
            "gradient": GRADIENT,
            "intervention": INTERVENTION,
            "resolution": {
                "least_float32_effect": resolution(work["value"]),
                "roundings": ROUNDINGS,
                "float64": len(exact),
                "removals": len(removals),
                "method": METHOD,
            },
            "heads": heads,
        }

    chunks = [removals[start : start + per_pass] for start in range(0, len(removals), per_pass)]
    return [begin, *(remove(chunk) for chunk in chunks), answer]
