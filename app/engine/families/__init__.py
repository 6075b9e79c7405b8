"""The model families the lab reads, one small file each, and which one a model folder is."""

from app.engine.families.base import Family
from app.engine.families.bert import BERT, ROBERTA
from app.engine.families.distilbert import DISTILBERT
from app.engine.families.gemma3 import EMBEDDING_GEMMA, GEMMA3
from app.engine.families.gpt2 import GPT2
from app.engine.families.llama import LLAMA, QWEN3
from app.engine.families.modernbert import MODERNBERT
from app.engine.families.mpnet import MPNET

FAMILIES = (BERT, ROBERTA, DISTILBERT, MPNET, MODERNBERT, GPT2, LLAMA, QWEN3, GEMMA3, EMBEDDING_GEMMA)


class UnknownFamily(ValueError):
    pass


def family_of(config) -> Family:
    for family in FAMILIES:
        if config.model_type in family.model_types and family.reads(config):
            return family
    known = ", ".join(dict.fromkeys(f"{family.name} ({'/'.join(family.model_types)})" for family in FAMILIES))
    raise UnknownFamily(f"a {config.model_type!r} model, which the lab does not read; it reads {known}")
