"""The model families the lab reads, one small file each, and which one a model folder is."""

from app.engine.families.base import Family
from app.engine.families.bert import BERT, ROBERTA
from app.engine.families.distilbert import DISTILBERT
from app.engine.families.gpt2 import GPT2
from app.engine.families.llama import LLAMA
from app.engine.families.mpnet import MPNET

FAMILIES = (BERT, ROBERTA, DISTILBERT, MPNET, GPT2, LLAMA)


class UnknownFamily(ValueError):
    pass


def family_of(config) -> Family:
    for family in FAMILIES:
        if config.model_type in family.model_types:
            return family
    known = ", ".join(f"{family.name} ({'/'.join(family.model_types)})" for family in FAMILIES)
    raise UnknownFamily(f"a {config.model_type!r} model, which the lab does not read; it reads {known}")
