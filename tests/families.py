"""Tiny random models of every family the lab reads, saved with save_pretrained into a folder: configs
with a few dimensions, WordPiece vocabularies written here, byte-level BPE tokenizers trained here with
`tokenizers`; some inside a sentence-transformers folder (modules.json and its modules), saved with
sentence-transformers' own API. Nothing is downloaded."""

from functools import partial
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    BertConfig,
    BertModel,
    BertTokenizerFast,
    DistilBertConfig,
    DistilBertModel,
    DistilBertTokenizerFast,
    ElectraConfig,
    ElectraModel,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    Gemma3TextModel,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MarianConfig,
    MarianMTModel,
    MistralConfig,
    MistralForCausalLM,
    ModernBertConfig,
    ModernBertModel,
    MPNetConfig,
    MPNetModel,
    MPNetTokenizerFast,
    OPTConfig,
    OPTModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3Model,
    RobertaConfig,
    RobertaModel,
    T5Config,
    T5ForConditionalGeneration,
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
    model, tokenizer = gpt2_objects()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def gpt2_objects() -> tuple[GPT2LMHeadModel, PreTrainedTokenizerFast]:
    """The tiny GPT-2 and its tokenizer as objects in memory, never saved (what a notebook holds)."""
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
    end = "<|endoftext|>"
    return GPT2LMHeadModel(config), PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=end, eos_token=end, unk_token=end, model_max_length=POSITIONS
    )


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


def long_llama(
    folder: Path, positions: int = 8192, blocks: int = 4, heads: int = 8, hidden: int = 256, sharpness: float = 1.0
) -> None:
    """A Llama-style decoder for long inputs: by default 4 blocks, 8 query heads over 4 K/V heads, hidden 256
    and `positions` positions, with the tests' byte-level tokenizer (about 2.5 characters a token).
    `sharpness` scales W_Q and W_K: random weights attend almost evenly to thousands of keys, a picture of
    nothing; scaled, each query picks a few keys, as a trained model's heads do."""
    tokenizer = byte_level_bpe(["<s>", "</s>", "<unk>"])
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    config = LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=hidden,
        num_hidden_layers=blocks,
        num_attention_heads=heads,
        num_key_value_heads=heads // 2,
        intermediate_size=2 * hidden,
        max_position_embeddings=positions,
        bos_token_id=0,
        eos_token_id=1,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight *= sharpness
            layer.self_attn.k_proj.weight *= sharpness
    model.save_pretrained(folder)
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>", model_max_length=positions
    ).save_pretrained(folder)


def qwen2(folder: Path) -> None:
    """Llama's layout with biases on Q, K and V, and a sliding window of 3 tokens in its second block only
    (`layer_types`): shorter than the tests' texts."""
    configure = partial(Qwen2Config, use_sliding_window=True, sliding_window=3, max_window_layers=1)
    llama(folder, (configure, Qwen2ForCausalLM))


def mistral(folder: Path) -> None:
    """Llama's layout with a sliding window of 3 tokens in every block (no `layer_types`)."""
    llama(folder, (partial(MistralConfig, sliding_window=3), MistralForCausalLM))


def modernbert(folder: Path) -> None:
    """Block 0 global, block 1 local with a window of 2 tokens on either side (local_attention 4), and the two
    rotating by other frequencies; no biases, GeGLU; inside a sentence-transformers folder that pools the
    [CLS] token."""
    tokenizer = byte_level_bpe(["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"])
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 1), ("[SEP]", 2)]
    )
    config = ModernBertConfig(
        vocab_size=tokenizer.get_vocab_size(),
        max_position_embeddings=POSITIONS,
        global_attn_every_n_layers=2,
        local_attention=4,
        global_rope_theta=160_000.0,
        local_rope_theta=10_000.0,
        pad_token_id=0,
        cls_token_id=1,
        sep_token_id=2,
        bos_token_id=1,
        eos_token_id=2,
        **SIZE,
    )
    ModernBertModel(config).save_pretrained(folder)
    special = {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "mask_token": "[MASK]"}
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="[UNK]", model_max_length=POSITIONS, **special
    ).save_pretrained(folder)
    sentence_transformers_folder(folder, "cls")


def qwen3_tokenizer(folder: Path) -> int:
    """Byte-level BPE that closes every text with <|endoftext|>, as Qwen3-Embedding's does: its vocabulary size."""
    tokenizer = byte_level_bpe(["<|endoftext|>"])
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A <|endoftext|>", pair="$A <|endoftext|> $B:1 <|endoftext|>:1", special_tokens=[("<|endoftext|>", 0)]
    )
    end = "<|endoftext|>"
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token=end, pad_token=end, unk_token=end, model_max_length=POSITIONS
    ).save_pretrained(folder)
    return tokenizer.get_vocab_size()


def qwen3_config(vocab_size: int) -> Qwen3Config:
    """Grouped K/V heads (4 query heads, 2 K/V heads), q and k RMS-normalised per head, no biases."""
    return Qwen3Config(
        vocab_size=vocab_size,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=POSITIONS,
        tie_word_embeddings=False,
        eos_token_id=0,
        pad_token_id=0,
        **SIZE,
    )


def qwen3(folder: Path) -> None:
    """A causal decoder with its LM head."""
    Qwen3ForCausalLM(qwen3_config(qwen3_tokenizer(folder))).save_pretrained(folder)


def qwen3_embedding(folder: Path) -> None:
    """Qwen3-Embedding's layout: the decoder without its head, pooled by the last token and normalised, with an
    instruction prompt for queries."""
    Qwen3Model(qwen3_config(qwen3_tokenizer(folder))).save_pretrained(folder)
    prompts = {"query": "Instruct: Given a question, find the answer\nQuery:", "document": ""}
    sentence_transformers_folder(folder, "lasttoken", normalize=True, prompts=prompts)


def gemma3_tokenizer(folder: Path) -> int:
    """<pad>, <eos>, <bos> at Gemma's ids 0, 1, 2; every text opened with <bos> and closed with <eos>."""
    tokenizer = byte_level_bpe(["<pad>", "<eos>", "<bos>", "<unk>"])
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos> $A <eos>", pair="<bos> $A <eos> $B:1 <eos>:1", special_tokens=[("<bos>", 2), ("<eos>", 1)]
    )
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        model_max_length=POSITIONS,
    ).save_pretrained(folder)
    return tokenizer.get_vocab_size()


def gemma3_config(vocab_size: int, **changes) -> Gemma3TextConfig:
    """Block 0 local (a window of 3), block 1 global, each rotating by its own θ; grouped K/V heads; scores
    scaled by 1/√24 (query_pre_attn_scalar), not 1/√16; an attention soft-cap in the config, which Gemma 3's
    attention does not apply; the LM head's logits capped at 3."""
    settings = {
        "num_key_value_heads": 2,
        "head_dim": 16,
        "query_pre_attn_scalar": 24,
        "sliding_window": 3,
        "layer_types": ["sliding_attention", "full_attention"],
        "max_position_embeddings": POSITIONS,
        "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 3.0,
    }
    return Gemma3TextConfig(vocab_size=vocab_size, **{**SIZE, **settings, **changes})


def gemma3(folder: Path) -> None:
    """A causal decoder with its LM head."""
    Gemma3ForCausalLM(gemma3_config(gemma3_tokenizer(folder))).save_pretrained(folder)
    nonzero_norms(folder, Gemma3ForCausalLM)


def embeddinggemma(folder: Path) -> None:
    """EmbeddingGemma's layout: bidirectional (its local block sees a window of 2 tokens on either side:
    sliding_window 4 as the config is saved), mean pooling, two Dense layers (the second with a bias and
    Tanh), normalisation, and prompts."""
    Gemma3TextModel(
        gemma3_config(gemma3_tokenizer(folder), use_bidirectional_attention=True, sliding_window=4)
    ).save_pretrained(folder)
    nonzero_norms(folder, Gemma3TextModel)
    prompts = {"query": "task: search result | query: ", "document": "title: none | text: "}
    dense = [(64, 96, False, torch.nn.Identity()), (96, 48, True, torch.nn.Tanh())]
    sentence_transformers_folder(folder, "mean", dense=dense, normalize=True, prompts=prompts)


def nonzero_norms(folder: Path, model_class) -> None:
    """Gemma initialises its RMSNorms' weights to 0 (it scales by 1 + weight): random ones, so that a norm
    read as weight alone, or its offset forgotten, changes the numbers."""
    model = model_class.from_pretrained(folder)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.normal_(0, 0.5)
    model.save_pretrained(folder)


def sentence_transformers_folder(
    folder: Path, pooling: str, dense=(), normalize: bool = False, prompts: dict | None = None
) -> None:
    """The saved model as a sentence-transformers folder, written by sentence-transformers itself: modules.json,
    the Pooling module, Dense modules ((in, out, bias, activation) each, random weights) and Normalize."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer

    transformer = Transformer(str(folder))
    modules = [transformer, Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling)]
    for in_features, out_features, bias, activation in dense:
        modules.append(Dense(in_features, out_features, bias=bias, activation_function=activation))
    if normalize:
        modules.append(Normalize())
    SentenceTransformer(modules=modules, prompts=prompts).save(str(folder))


def opt(folder: Path) -> None:
    """A family the lab has no adapter for: OPT, a causal decoder, read for its attention weights only."""
    tokenizer = byte_level_bpe(["</s>", "<pad>", "<unk>"])
    tokenizer.post_processor = processors.TemplateProcessing(
        single="</s> $A", pair="</s> $A </s> $B:1", special_tokens=[("</s>", 0)]
    )
    config = OPTConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        ffn_dim=96,
        word_embed_proj_dim=64,
        max_position_embeddings=POSITIONS,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=0,
    )
    OPTModel(config).save_pretrained(folder)
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="</s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        model_max_length=POSITIONS,
    ).save_pretrained(folder)


def electra(folder: Path) -> None:
    """A family the lab has no adapter for, of encoders: ELECTRA, bidirectional, with token types."""
    vocab = wordpiece_vocab(folder, ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    config = ElectraConfig(vocab_size=len(WORDPIECES) + 5, embedding_size=64, max_position_embeddings=POSITIONS, **SIZE)
    ElectraModel(config).save_pretrained(folder)
    BertTokenizerFast(vocab).save_pretrained(folder)


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
    "modernbert": modernbert,
    "qwen3": qwen3,
    "gemma3": gemma3,
    "embeddinggemma": embeddinggemma,
}


def pegasus(folder: Path) -> Path:
    """An encoder-decoder the lab has no family for (it reads T5, BART and Marian as such)."""
    from transformers import PegasusConfig, PegasusModel

    config = PegasusConfig(
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        vocab_size=50,
    )
    PegasusModel(config).save_pretrained(folder)
    BertTokenizerFast(wordpiece_vocab(folder, ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])).save_pretrained(folder)
    return folder


# Tiny models the family tests leave out: a sentence-transformers layout of a family, or a family without an
# adapter.
MORE_BUILDERS = {"qwen3-embedding": qwen3_embedding, "opt": opt, "electra": electra}
# Encoder-decoders, read by an engine of their own (app.engine.encoder_decoder): not among the one-text families.
ENCODER_DECODERS = {
    "t5": lambda folder: t5(folder),
    "bart": lambda folder: bart(folder),
    "marian": lambda folder: marian(folder),
}


def build(family: str, folder: Path) -> Path:
    torch.manual_seed(0)
    {**BUILDERS, **MORE_BUILDERS, **ENCODER_DECODERS}[family](folder)
    return folder


# Encoder-decoders: 2 encoder blocks and 3 decoder blocks, so that a stack read for the other shows.
# BART's and Marian's shape (T5 names its sizes otherwise).
SEQ2SEQ = {
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 3,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "max_position_embeddings": POSITIONS,
}


def metaspace_bpe(special: list[str]) -> Tokenizer:
    """A SentencePiece-style vocabulary (pieces of words marked ▁ at a word's start), trained here, with the
    end token after a text as T5's and Marian's tokenizers put it."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    tokenizer.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=200, special_tokens=special))
    end = tokenizer.token_to_id("</s>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", end)]
    )
    return tokenizer


def t5(folder: Path) -> None:
    """Relative-position buckets in both stacks (8 buckets, a distance of 16), a gated-GELU FFN, start token <pad>.
    As many decoder blocks as encoder blocks: transformers 5.25's generate sizes a T5's cache by the encoder's
    count (num_layers), and fails on a T5 with more decoder blocks."""
    tokenizer = metaspace_bpe(["<pad>", "</s>", "<unk>"])
    config = T5Config(
        vocab_size=tokenizer.get_vocab_size(),
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
        feed_forward_proj="gated-gelu",
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )
    torch.manual_seed(0)
    T5ForConditionalGeneration(config).save_pretrained(folder)
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", eos_token="</s>", unk_token="<unk>", model_max_length=POSITIONS
    ).save_pretrained(folder)


def bart(folder: Path) -> None:
    """BART's byte-level BPE with <s> … </s> around a text, start token </s>, and the forced end token at the
    last position that BART's generation config asks for (a logits processor the written target goes through)."""
    tokenizer = byte_level_bpe(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), add_prefix_space=False)
    config = BartConfig(
        vocab_size=tokenizer.get_vocab_size(),
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        forced_eos_token_id=2,
        **SEQ2SEQ,
    )
    torch.manual_seed(0)
    BartForConditionalGeneration(config).save_pretrained(folder)
    special = {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>"}
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", pad_token="<pad>", mask_token="<mask>", **special
    ).save_pretrained(folder)


def marian(folder: Path) -> None:
    """Marian's sinusoidal positions and start token <pad>, with a fast SentencePiece-style tokenizer built here:
    Marian's own tokenizer needs the sentencepiece package, which the lab does not install."""
    tokenizer = metaspace_bpe(["<pad>", "</s>", "<unk>"])
    config = MarianConfig(
        vocab_size=tokenizer.get_vocab_size(),
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
        **SEQ2SEQ,
    )
    torch.manual_seed(0)
    MarianMTModel(config).save_pretrained(folder)
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", eos_token="</s>", unk_token="<unk>", model_max_length=POSITIONS
    ).save_pretrained(folder)
