"""Tiny random models of every family the lab reads, saved with save_pretrained into a folder: configs
with a few dimensions, WordPiece vocabularies written here, byte-level BPE tokenizers trained here with
`tokenizers`. Nothing is downloaded."""

from functools import partial
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    BertConfig,
    BertModel,
    BertTokenizerFast,
    DistilBertConfig,
    DistilBertModel,
    DistilBertTokenizerFast,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    MPNetConfig,
    MPNetModel,
    MPNetTokenizerFast,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    RobertaConfig,
    RobertaModel,
    XLMRobertaConfig,
    XLMRobertaModel,
)

CORPUS = [
    "The cat sat on the mat.",
    "Attention is all you need, said the paper.",
    "A quick brown fox jumps over the lazy dog!",
    "The river bank was steep and the animal was tired.",
] * 20
WORDS = sorted({word.strip(".,!").lower() for line in CORPUS for word in line.split()})
WORDPIECES = [".", ",", "!", *WORDS, "##s", "##ed", "##ing"]
SIZE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 96}
POSITIONS = 64


def byte_level_bpe(special: list[str]) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    return tokenizer


def wordpiece_vocab(folder: Path, special: list[str], last: list[str] = ()) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join([*special, *WORDPIECES, *last]))
    return str(folder / "vocab.txt")


def bert(folder: Path) -> None:
    vocab = wordpiece_vocab(folder, ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    BertModel(BertConfig(vocab_size=len(WORDPIECES) + 5, max_position_embeddings=POSITIONS, **SIZE)).save_pretrained(
        folder
    )
    BertTokenizerFast(vocab).save_pretrained(folder)


def roberta(folder: Path, family=(RobertaConfig, RobertaModel)) -> None:
    configure, model = family
    tokenizer = byte_level_bpe(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), add_prefix_space=False)
    config = configure(
        vocab_size=tokenizer.get_vocab_size(),
        max_position_embeddings=POSITIONS + 2,
        type_vocab_size=1,
        pad_token_id=1,
        **SIZE,
    )
    model(config).save_pretrained(folder)
    special = {"bos_token": "<s>", "cls_token": "<s>", "eos_token": "</s>", "sep_token": "</s>"}
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", pad_token="<pad>", mask_token="<mask>", **special
    ).save_pretrained(folder)


def xlm_roberta(folder: Path) -> None:
    roberta(folder, (XLMRobertaConfig, XLMRobertaModel))


def distilbert(folder: Path) -> None:
    vocab = wordpiece_vocab(folder, ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    config = DistilBertConfig(
        vocab_size=len(WORDPIECES) + 5, dim=64, n_layers=2, n_heads=4, hidden_dim=96, max_position_embeddings=POSITIONS
    )
    DistilBertModel(config).save_pretrained(folder)
    DistilBertTokenizerFast(vocab).save_pretrained(folder)


def mpnet(folder: Path) -> None:
    vocab = wordpiece_vocab(folder, ["<s>", "<pad>", "</s>", "[UNK]"], ["<mask>"])
    config = MPNetConfig(vocab_size=len(WORDPIECES) + 5, max_position_embeddings=POSITIONS + 2, **SIZE)
    MPNetModel(config).save_pretrained(folder)
    MPNetTokenizerFast(vocab).save_pretrained(folder)


def gpt2(folder: Path) -> None:
    """With scores divided by the block's number as well as √d_head (`scale_attn_by_inverse_layer_idx`, as
    some GPT-2s were trained): a scale that is not 1/√d_head."""
    tokenizer = byte_level_bpe(["<|endoftext|>"])
    config = GPT2Config(
        scale_attn_by_inverse_layer_idx=True,
        vocab_size=tokenizer.get_vocab_size(),
        n_positions=POSITIONS,
        n_embd=64,
        n_layer=2,
        n_head=4,
        bos_token_id=0,
        eos_token_id=0,
    )
    GPT2LMHeadModel(config).save_pretrained(folder)
    end = "<|endoftext|>"
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=end, eos_token=end, unk_token=end, model_max_length=POSITIONS
    ).save_pretrained(folder)


def llama(folder: Path, family=(LlamaConfig, LlamaForCausalLM)) -> None:
    """Grouped-query attention (4 query heads, 2 K/V heads), RoPE, RMSNorm, SwiGLU, untied LM head, and a
    tokenizer that puts <s> first."""
    configure, model = family
    tokenizer = byte_level_bpe(["<s>", "</s>", "<unk>"])
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s>:1 $B:1", special_tokens=[("<s>", 0)]
    )
    config = configure(
        vocab_size=tokenizer.get_vocab_size(),
        num_key_value_heads=2,
        max_position_embeddings=POSITIONS,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
        **SIZE,
    )
    model(config).save_pretrained(folder)
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>", model_max_length=POSITIONS
    ).save_pretrained(folder)


def qwen2(folder: Path) -> None:
    """Llama's layout with biases on Q, K and V, and a sliding window of 3 tokens in its second block only
    (`layer_types`): shorter than the tests' texts."""
    configure = partial(Qwen2Config, use_sliding_window=True, sliding_window=3, max_window_layers=1)
    llama(folder, (configure, Qwen2ForCausalLM))


def mistral(folder: Path) -> None:
    """Llama's layout with a sliding window of 3 tokens in every block (no `layer_types`)."""
    llama(folder, (partial(MistralConfig, sliding_window=3), MistralForCausalLM))


BUILDERS = {
    "bert": bert,
    "roberta": roberta,
    "xlm-roberta": xlm_roberta,
    "distilbert": distilbert,
    "mpnet": mpnet,
    "gpt2": gpt2,
    "llama": llama,
    "qwen2": qwen2,
    "mistral": mistral,
}


def build(family: str, folder: Path) -> Path:
    torch.manual_seed(0)
    BUILDERS[family](folder)
    return folder
