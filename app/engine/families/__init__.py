"""The model families the lab reads, one small file each, and which one a model folder is."""

from app.engine.families.bart import BART, MARIAN
from app.engine.families.base import Family
from app.engine.families.bert import BERT, ROBERTA
from app.engine.families.distilbert import DISTILBERT
from app.engine.families.encoder_decoder import EncoderDecoderFamily
from app.engine.families.gemma3 import EMBEDDING_GEMMA, GEMMA3
from app.engine.families.gpt2 import GPT2
from app.engine.families.llama import LLAMA, QWEN3
from app.engine.families.modernbert import MODERNBERT
from app.engine.families.mpnet import MPNET
from app.engine.families.t5 import T5

FAMILIES = (BERT, ROBERTA, DISTILBERT, MPNET, MODERNBERT, GPT2, LLAMA, QWEN3, GEMMA3, EMBEDDING_GEMMA)
# Two stacks, a source and a target (app.engine.encoder_decoder): read by an engine of their own.
ENCODER_DECODERS = (T5, BART, MARIAN)


class UnknownFamily(ValueError):
    pass


def family_of(config) -> Family | EncoderDecoderFamily:
    for family in (*FAMILIES, *ENCODER_DECODERS):
        if config.model_type in family.model_types and family.reads(config):
            return family
    known = ", ".join(
        dict.fromkeys(f"{family.name} ({'/'.join(family.model_types)})" for family in (*FAMILIES, *ENCODER_DECODERS))
    )
    raise UnknownFamily(f"a {config.model_type!r} model, which the lab does not read; it reads {known}")
