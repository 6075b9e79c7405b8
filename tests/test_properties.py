"""Properties over arbitrary Unicode prompts (hypothesis) and a fuzz of the OpenAPI schema (schemathesis)."""

import unicodedata

import numpy as np
import pytest
import schemathesis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app.main import create_app
from app.settings import get_settings
from tests.float32 import tolerance

# Any Unicode but lone surrogates, which JSON can carry and the API refuses (tested elsewhere).
PROMPTS = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=300)


@example(text="금 is gold")  # one syllable, three jamo pieces
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=PROMPTS)
def test_any_prompt_gets_an_answer_whose_offsets_slice_the_text(client, minilm, text):
    response = client.post("/api/analyze", json={"text": text})
    assert response.status_code in (200, 422), response.text
    if response.status_code == 422:
        assert not text.strip() or "no characters" in response.json()["detail"]
        return
    body = response.json()
    normalize = minilm.tokenizer.backend_tokenizer.normalizer.normalize_str
    for token in body["tokens"]:
        assert 0 <= token["start"] <= token["end"] <= len(text)
        if token["end"] > token["start"] and token["text"] != "[UNK]" and not token["special"]:
            piece, span = token["text"].removeprefix("##"), text[token["start"] : token["end"]]
            # A character the tokenizer decomposes (a Hangul syllable into jamo) yields several pieces
            # that all point at that one character: each is a part of its decomposition.
            decomposed = len(span) == 1 and piece in unicodedata.normalize("NFD", normalize(span))
            assert normalize(span) == piece or decomposed, (span, piece)
    head = client.get(f"/api/runs/{body['run_id']}/layers/3/heads/2").json()
    weights = np.array(head["weights"])
    np.testing.assert_allclose(weights.sum(1), 1, atol=tolerance(weights.shape[1]))


@pytest.fixture(scope="module")
def schema(minilm):
    """The app under a small bound on a patching or scoreboard's passes (heads × keys × tokens): a generated
    request past it is refused, as the schema says; one within it is answered, and the fuzz stays seconds."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ATTENTION_LAB_MAX_PATCH_TOKENS", "4096")
        get_settings.cache_clear()
        yield schemathesis.openapi.from_asgi("/openapi.json", create_app(minilm))
    get_settings.cache_clear()


def operations():
    return [result.ok() for result in schemathesis.openapi.from_dict(create_app_schema()).get_all_operations()]


def create_app_schema() -> dict:
    return create_app().openapi()  # the schema alone: no model is loaded for it


@pytest.mark.parametrize("operation", operations(), ids=lambda operation: operation.label)
def test_the_schema_holds_for_any_request(schema, operation):
    """Every documented route, fed generated requests: no 5xx, and answers match the documented schemas."""
    live = schema[operation.path][operation.method.upper()]

    @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
    @given(case=live.as_strategy())
    def check(case):
        case.call_and_validate(
            checks=[schemathesis.checks.not_a_server_error, schemathesis.checks.response_schema_conformance]
        )

    check()
