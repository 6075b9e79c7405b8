"""Request and response bodies of the search lesson's router (app.web.search)."""

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from app.web.schemas.common import Matrix, ModelName, readable


class IndexRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    documents: str | None = Field(
        None,
        max_length=1_000_000,
        description="The corpus, one document per line (empty lines left out; at most 5,000 documents of at most "
        "2,000 characters, each read up to the model's pooling length, and the whole request within the body limit, "
        "ATTENTION_LAB_MAX_BODY_BYTES: 512 KiB by default); default: the corpus that ships with the lab",
        examples=["The bank raised its interest rate.\nWe sat on the bank of the river."],
    )
    model: ModelName = None
    prompt: str | None = Field(
        None,
        max_length=200,
        description="The model's prompt, by name, read before every document; default: its prompt for documents "
        '("document", "passage") where it names one, else its default prompt; "": none',
    )
    prefix: str = Field("", max_length=200, description='Typed before every document and read as its text: "passage: "')


class IndexStarted(BaseModel):
    index_id: str = Field(description="The index's content address: GET /api/search/index/{index_id} computes it")
    documents: int
    prompt: str | None = Field(description="The model's prompt every document is read with (resolved)")
    prefix: str


class IndexResponse(BaseModel):
    index_id: str
    model: str
    documents: int
    size: int = Field(description="The length of a document's vector")
    tokens: int = Field(description="Tokens read, the prompt's and the added ones included")
    cut: int = Field(description="Documents longer than max_tokens, read up to it")
    max_tokens: int = Field(description="The model's pooling length: sentence-transformers' max_seq_length")
    passes: int = Field(description="Padded passes the index took")
    seconds: float = Field(description="What they took on the worker that computed them")
    prompt: str | None
    prompt_text: str = Field(description="The prompt's text as it is put before every document")
    prefix: str


class Hnsw(BaseModel):
    """The approximate index's knobs (usearch's HNSW)."""

    model_config = ConfigDict(extra="forbid")

    m: int = Field(16, ge=2, le=64, description="Links per vector in each layer of the graph (M); a rebuild")
    ef_construction: int = Field(
        128, ge=2, le=1024, description="Depth of the search that links each vector as it is added; a rebuild"
    )
    ef: int = Field(64, ge=1, le=1024, description="Depth of a query's search (at least k is searched)")


SearchText = Annotated[str, AfterValidator(readable), Field(max_length=2000, examples=["where can I borrow money"])]


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index_id: str = Field(max_length=64)
    query: SearchText
    k: int = Field(10, ge=1, le=100, description="How many documents to return (at most the index's)")
    prompt: str | None = Field(
        None,
        max_length=200,
        description='The model\'s prompt, by name, read before the query; default: its "query" prompt where it has '
        'one, else its default prompt; "": none',
    )
    prefix: str = Field("", max_length=200, description='Typed before the query and read as its text: "query: "')
    hnsw: Hnsw = Hnsw()


class SearchHit(BaseModel):
    rank: int = Field(description="1 for the best")
    document: int = Field(description="Its line in the corpus, from 0")
    text: str
    score: float = Field(description="The cosine of the query's vector and the document's")


class SearchQuery(BaseModel):
    text: str = Field(description="As the model read it: the prompt's text and the typed prefix before the query")
    tokens: int
    prompt: str | None
    prefix: str
    ms: float = Field(description="Its one forward pass, pooled and normalised, on this worker")


class Approximate(BaseModel):
    hits: list[SearchHit]
    recall: float = Field(description="recall@k: the share of the exact top k the graph's top k holds")
    ms: float = Field(description="The graph's search")
    m: int
    ef_construction: int
    ef: int
    build_seconds: float = Field(description="What building the graph took on the worker that built it")


class SearchResponse(BaseModel):
    index_id: str
    k: int
    query: SearchQuery
    exact: list[SearchHit] = Field(description="The top k by cosine over every document, best first")
    exact_ms: float = Field(description="Every cosine and the sort (NumPy, float64)")
    approximate: Approximate


class PairsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index_id: str = Field(max_length=64)
    query: SearchText
    documents: list[Annotated[int, Field(ge=0)]] = Field(
        min_length=1, max_length=20, description="The documents to re-read with the query, by line (a top k)"
    )
    layer: int | None = Field(None, ge=0, description="The block whose A → B cells are drawn; default: the last")
    head: Annotated[int, Field(ge=0)] | Literal["mean"] = Field("mean", description='A head, or "mean" of them all')
    shown: int = Field(0, ge=0, description="Which of the documents' pairs has its cells drawn (its place)")


class Pair(BaseModel):
    document: int
    text: str
    run_id: str = Field(description="The pair as a run of the lab: query as A, document as B")
    cross_share: float = Field(
        description="The mean share of attention an A token gives the B tokens, over every block and head"
    )
    relevance: float | None = Field(description="The cross-encoder's score, where the lab has one")


class PairCells(BaseModel):
    document: int
    run_id: str
    layer: int
    head: int | Literal["mean"]
    rows: list[str] = Field(description="Segment A's tokens (the query's, [CLS] and its [SEP]), by label")
    cols: list[str] = Field(description="Segment B's tokens (the document's and the last [SEP]), by label")
    cells: Matrix = Field(description="[A token][B token]: the attention weights of the view, A → B")


class PairsResponse(BaseModel):
    layout: str = Field(description="How the model reads a pair: [CLS] A [SEP] B [SEP]")
    pairs: list[Pair] = Field(description="In the order asked")
    shown: PairCells
    pairs_ms: float = Field(
        description="The pairs read by the model in padded passes of their own, nothing kept: a cross-encoder's cost"
    )
    pair_passes: int = Field(description="The padded passes the pairs took (one input each)")
    cross_encoder: str | None = Field(description="The cross-encoder folder's name, where the lab has one")
    cross_ms: float | None = Field(description="The cross-encoder's passes over the pairs")
