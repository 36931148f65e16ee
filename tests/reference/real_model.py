#!/usr/bin/env python3
"""eft on a real pretrained model (SmolLM2-135M-Instruct, scripts/real-model.sh) against Hugging Face
transformers and peft, the references a user would trust. tests/reference/real_model_test.sh runs
each part; every part prints one summary line and exits non-zero on a mismatch.

  logits MODEL OUT.safetensors
      transformers' logits for two rendered conversations, in fp32 and fp64, with the input ids and
      labels, for tests/unit/trainer/model/real_model_test.cc to compare eft's against.
  generate MODEL EFT_TRAIN [N]
      greedy generation: eft-train generate --format ids must give exactly transformers' tokens
      (the first N prompts; default all 6).
  outputs BASE OUT [TEMPLATE]
      OUT, a directory eft wrote from BASE, carries every Hugging Face file of BASE (TEMPLATE, the
      data.chat_template training used, as chat_template.jinja), transformers' tokenizer renders
      conversations from OUT as from BASE (or as TEMPLATE), and OUT loads with every weight matched
      (a model) or in peft (an adapter).
  data MODEL OUT.jsonl N
      N pretokenized chat conversations (HF tokenizer and template; labels on the assistant's turn only).
  loop MODEL DATA.jsonl EVENTS LR STEPS
      an independent fine-tuning loop (transformers' model, torch.optim.AdamW, clipping, one batch of
      all of DATA per step) against the step losses eft-train reported in EVENTS.
"""
import json
import os
import subprocess
import sys

import torch
import transformers

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"},
     {"role": "assistant", "content": "The capital of France is Paris."}],
    [{"role": "system", "content": "You answer in one short sentence."},
     {"role": "user", "content": "Why is the sky blue?"},
     {"role": "assistant", "content": "Air scatters blue sunlight more than red."}],
]
PROMPTS = ["What is the capital of France?", "Write a haiku about autumn.", "How many legs does a spider have?",
           "Give me three tips for sleeping better.", "Translate 'good morning' into Spanish.",
           "What is 12 times 7?"]


def load_model(directory, dtype=torch.float32):
    return transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=dtype).eval()


def tokenizer_of(directory):
    return transformers.AutoTokenizer.from_pretrained(directory)


def render_ids(tokenizer, messages, **kwargs):
    ids = tokenizer.apply_chat_template(messages, tokenize=True, **kwargs)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return list(ids)


def logits(model_dir, out):
    from safetensors.torch import save_file
    tokenizer = tokenizer_of(model_dir)
    rows = [render_ids(tokenizer, c) for c in CONVERSATIONS]
    length = min(len(r) for r in rows)
    input_ids = torch.tensor([r[:length] for r in rows], dtype=torch.int64)
    labels = input_ids.clone()
    labels[:, : length // 4] = -100
    tensors = {"input_ids": input_ids, "labels": labels}
    with torch.no_grad():
        for name, dtype in (("logits32", torch.float32), ("logits64", torch.float64)):
            model = load_model(model_dir, dtype)
            result = model(input_ids=input_ids, labels=labels)
            tensors[name] = result.logits.to(dtype).contiguous()
            tensors["loss" + name[6:]] = result.loss.reshape(1).to(torch.float64)
            del model
    save_file(tensors, out, metadata={"transformers": transformers.__version__, "torch": torch.__version__})
    print(f"transformers {transformers.__version__}: logits of {list(input_ids.shape)} tokens in fp32 and fp64 "
          f"-> {out}")
    return 0


def generate(model_dir, eft_train, count=len(PROMPTS)):
    tokenizer = tokenizer_of(model_dir)
    model = load_model(model_dir)
    new_tokens, mismatches, prompts = 32, [], PROMPTS[:int(count)]
    for prompt in prompts:
        messages = [{"role": "user", "content": prompt}]
        ids = torch.tensor([render_ids(tokenizer, messages, add_generation_prompt=True)])
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=new_tokens)
        want = out[0, ids.shape[1]:].tolist()
        eos = model.generation_config.eos_token_id
        eos = set(eos if isinstance(eos, list) else [eos])
        if want and want[-1] in eos:
            want = want[:-1]  # eft prints the reply without the eos that ended it
        got = subprocess.run([eft_train, "generate", "--model", model_dir, "--prompt", prompt, "--format", "ids",
                              "--max-new-tokens", str(new_tokens), "--threads", "2"],
                             check=True, capture_output=True, text=True).stdout.split()
        got = [int(t) for t in got]
        status = "same" if got == want else "DIFFERENT"
        print(f"{status}: {prompt!r} -> {tokenizer.decode(want)!r}")
        if got != want:
            mismatches.append(prompt)
            print(f"  transformers {want}\n  eft          {got}\n  eft says     {tokenizer.decode(got)!r}")
    print(f"greedy generation, {len(prompts)} prompts of up to {new_tokens} tokens: "
          f"{len(prompts) - len(mismatches)} identical to transformers {transformers.__version__}")
    return 1 if mismatches else 0


def hf_files(directory):
    """The non-weight files of a Hugging Face model directory (trainer/checkpoint/full_state.cc)."""
    names = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name == "additional_chat_templates" and os.path.isdir(path):
            names += [f"{name}/{f}" for f in sorted(os.listdir(path)) if f.endswith(".jinja")]
        elif os.path.isfile(path) and not name.endswith((".safetensors", ".bin", ".gguf")) and \
                name not in ("config.json", "model.safetensors.index.json"):
            names.append(name)
    return names


def outputs(base, out, template=None):
    problems = []
    base_files = [f for f in hf_files(base) if not f.startswith("README")]
    for name in base_files:
        target = os.path.join(out, name)
        if not os.path.exists(target):
            problems.append(f"{name} is missing")
        elif name == "chat_template.jinja" and template:
            if open(target).read() != open(template).read():
                problems.append("chat_template.jinja is not the template training used")
        elif open(os.path.join(base, name), "rb").read() != open(target, "rb").read():
            problems.append(f"{name} differs from the base's")
    base_tokenizer, out_tokenizer = tokenizer_of(base), tokenizer_of(out)
    if template:
        base_tokenizer.chat_template = open(template).read()
    conversations = CONVERSATIONS + [[{"role": "user", "content": p}] for p in PROMPTS[:2]]
    for conversation in conversations:
        for generation_prompt in (False, True):
            kwargs = {"tokenize": False, "add_generation_prompt": generation_prompt}
            want = base_tokenizer.apply_chat_template(conversation, **kwargs)
            got = out_tokenizer.apply_chat_template(conversation, **kwargs)
            if got != want:
                problems.append(f"the output's tokenizer renders {conversation[-1]['content']!r} as {got!r}, "
                                f"the input's as {want!r}")
            if out_tokenizer(got)["input_ids"] != base_tokenizer(want)["input_ids"]:
                problems.append(f"the output's tokenizer gives other ids for {conversation[-1]['content']!r}")
    adapter = os.path.exists(os.path.join(out, "adapter_config.json"))
    if adapter:
        import peft
        model = peft.PeftModel.from_pretrained(load_model(base), out)
        loaded = f"peft {peft.__version__} loads the adapter ({type(model.base_model).__name__})"
    else:
        model, info = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32,
                                                                        output_loading_info=True)
        bad = {k: v for k, v in info.items() if v}
        if bad:
            problems.append(f"transformers loads it with problems: {bad}")
        loaded = f"transformers loads it ({type(model).__name__}, every weight matched)"
    for p in problems:
        print("PROBLEM:", p)
    print(f"{out}: {len(base_files)} files of the base present{' (its own chat template)' if template else ''}, "
          f"{2 * len(conversations)} renderings identical, {loaded}" if not problems else f"{len(problems)} problems")
    return 1 if problems else 0


def data(model_dir, out, n):
    tokenizer = tokenizer_of(model_dir)
    topics = ["tea", "rivers", "bicycles", "owls", "glass", "chess", "bread", "comets", "maps", "violins",
              "tides", "honey"]
    with open(out, "w") as f:
        for i in range(n):
            topic = topics[i % len(topics)]
            question = [{"role": "user", "content": f"Tell me one fact about {topic}."}]
            answer = {"role": "assistant", "content": f"Here is a fact about {topic}: fact number {i + 1}."}
            prompt = render_ids(tokenizer, question, add_generation_prompt=True)
            whole = render_ids(tokenizer, question + [answer])
            assert whole[: len(prompt)] == prompt
            f.write(json.dumps({"input_ids": whole, "labels": [-100] * len(prompt) + whole[len(prompt):]}) + "\n")
    print(f"{n} conversations -> {out}")
    return 0


def loop(model_dir, data_file, events, lr, steps, weight_decay=0.01, max_grad_norm=1.0):
    """What a user would write with transformers and PyTorch: every step one batch of all of the data
    (right-padded, attention mask), the mean loss over the trained tokens, clipping, AdamW with decay
    on every weight but norms and biases, a constant learning rate."""
    torch.manual_seed(0)
    rows = [json.loads(line) for line in open(data_file)]
    width = max(len(r["input_ids"]) for r in rows)
    pad = lambda seq, value: seq + [value] * (width - len(seq))  # noqa: E731
    input_ids = torch.tensor([pad(r["input_ids"], 0) for r in rows])
    labels = torch.tensor([pad(r["labels"], -100) for r in rows])
    mask = torch.tensor([pad([1] * len(r["input_ids"]), 0) for r in rows])
    model = load_model(model_dir).train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.999), eps=1e-8)
    losses = []
    for _ in range(steps):
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        losses.append(loss.item())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        optimizer.zero_grad()
    eft = [e["loss"] for e in map(json.loads, open(events)) if e.get("event") == "step"]
    # Bound: the first loss is one fp32 forward of the same weights on both sides, different only in
    # reduction order. A mean of logsumexp(z) - z_label moves by at most twice the largest logit
    # error, and each side's fp32 logits are within ~1e-4 of the exact ones on this model
    # (RealModel.EftLogitsMatchTransformers: ~7e-5 on logits up to ~37), so 1e-4 of a loss of ~3
    # leaves room for a CPU that rounds less kindly. Later steps add the updates: AdamW's first steps
    # move every weight by about lr whatever its gradient's size, so a gradient entry within rounding of
    # zero may step the other way on the other side; those entries barely move the loss (that is why
    # their gradient is ~0), so the losses still agree to a small fraction (0.2%) of how far training
    # moved them. A wrong learning rate, betas, loss normalisation or label shift changes that movement
    # by a large fraction (measured: the two sides agree to ~1e-5 while the loss moves by ~2.7).
    moved = abs(losses[0] - losses[-1])
    bounds = [1e-4 * abs(losses[0])] + [1e-4 * abs(losses[0]) + 0.002 * moved] * (steps - 1)
    bad = len(eft) != steps or any(abs(a - b) > t for a, b, t in zip(eft, losses, bounds))
    for k, (a, b) in enumerate(zip(eft, losses)):
        print(f"step {k + 1}: eft {a:.6f}  transformers loop {b:.6f}  difference {abs(a - b):.2e} "
              f"(bound {bounds[k]:.2e})")
    print(f"fine-tuning {steps} steps at lr {lr}: eft's losses {'DIFFER from' if bad else 'match'} the "
          f"transformers + torch.optim.AdamW loop (the loop moved the loss by {moved:.4f})")
    return 1 if bad else 0


def main(argv):
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    transformers.logging.set_verbosity_error()
    part, args = argv[1], argv[2:]
    if part == "logits":
        return logits(*args)
    if part == "generate":
        return generate(*args)
    if part == "outputs":
        return outputs(*args)
    if part == "data":
        return data(args[0], args[1], int(args[2]))
    if part == "loop":
        return loop(args[0], args[1], args[2], float(args[3]), int(args[4]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
