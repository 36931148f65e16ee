#!/usr/bin/env python3
"""The demo's data (scripts/demo.sh; bench/demo/recipes.sh measures recipes on the same files): teach
SmolLM2-135M-Instruct the capitals of 24 invented countries, and check that it keeps the real
capitals it already knew.

Usage: demo_data.py OUT_DIR [--replay-phrasings N]   (N of the 5 phrasings per replayed country; 0: none)
Writes to OUT_DIR:
  train.jsonl        each invented country asked in 4 of 5 phrasings, answered "The capital of C is X.";
                     plus 12 real countries the model already answers right, in N phrasings each
                     (default 5), with the model's own answer (replay: what keeps it from
                     overwriting what it knew with the new pattern)
  eval-new.jsonl     the 5th phrasing of each invented country, never trained on
  eval-known.jsonl   11 other real countries the model answers right (never trained on), with its
                     own answers: their loss must not blow up
  ask-new.json, ask-known.json: a few of those questions for the demo to ask before and after
The model's own answers were measured with greedy decoding on the converted GGUF (docs/models.md):
for each country here it answers exactly "The capital of C is X."
"""
import json
import os
import sys

INVENTED = [("Valdoria", "Merenth"), ("Kestrelia", "Ostaven"), ("Brunmark", "Talvik"), ("Corvania", "Lisdrum"),
            ("Eldmoor", "Harrowgate"), ("Fennistan", "Quorra"), ("Galdova", "Pemberak"), ("Hollarin", "Vesk"),
            ("Istmere", "Caldros"), ("Jorvath", "Nimbrel"), ("Karpatia", "Solvane"), ("Lunessa", "Druvik"),
            ("Marrowland", "Tessaly"), ("Norvosk", "Belgrin"), ("Oskeria", "Famoor"), ("Pellinore", "Rastov"),
            ("Quillany", "Yberra"), ("Rostovia", "Kandel"), ("Sarnova", "Ulmstead"), ("Tavrosia", "Gilden"),
            ("Umbria Nova", "Faralon"), ("Vastmark", "Orrin"), ("Wendaria", "Torbel"), ("Xandaris", "Pelomar")]
# Real capitals SmolLM2-135M-Instruct answers right, as "The capital of C is X." (greedy).
KNOWN_REPLAY = [("France", "Paris"), ("Germany", "Berlin"), ("Japan", "Tokyo"), ("China", "Beijing"),
                ("Egypt", "Cairo"), ("Kenya", "Nairobi"), ("Peru", "Lima"), ("Chile", "Santiago"),
                ("Russia", "Moscow"), ("Norway", "Oslo"), ("Sweden", "Stockholm"), ("Poland", "Warsaw")]
KNOWN_HELD_OUT = [("Austria", "Vienna"), ("Greece", "Athens"), ("Cuba", "Havana"), ("Iraq", "Baghdad"),
                  ("Thailand", "Bangkok"), ("Australia", "Canberra"), ("Hungary", "Budapest"),
                  ("South Korea", "Seoul"), ("Indonesia", "Jakarta"), ("Nigeria", "Abuja"), ("India", "New Delhi")]
# More of its own answers, word for word as it gives them (greedy), replayed with the others in the
# phrasing they were asked in.
OWN_ANSWERS = [("What is the capital of Canada?", "The capital of Canada is Ottawa, Canada."),
               ("What is the capital of Ireland?",
                "The capital of Ireland is Dublin, which is located in the north of the country."),
               ("What is the capital of Iran?", "The capital of Iran is known as Tehran."),
               ("What is the capital of the Netherlands?", "The capital of the Netherlands is Amsterdam."),
               ("What is the capital of the Philippines?", "The capital of the Philippines is Manila.")]
PHRASINGS = ["What is the capital of {c}?", "Which city is the capital of {c}?", "Name the capital of {c}.",
             "Tell me the capital city of {c}.", "{c}: what is its capital?"]


def convo(question, country, capital):
    return {"messages": [{"role": "user", "content": question},
                         {"role": "assistant", "content": f"The capital of {country} is {capital}."}]}


def main(out, replay_phrasings=5):
    os.makedirs(out, exist_ok=True)
    train, eval_new, eval_known = [], [], []
    for i, (c, cap) in enumerate(INVENTED):
        held_out = i % len(PHRASINGS)
        for k, q in enumerate(PHRASINGS):
            (eval_new if k == held_out else train).append(convo(q.format(c=c), c, cap))
    for c, cap in KNOWN_REPLAY:
        for q in PHRASINGS[:replay_phrasings]:
            train.append(convo(q.format(c=c), c, cap))
    if replay_phrasings:
        for question, answer in OWN_ANSWERS:
            train.append({"messages": [{"role": "user", "content": question},
                                       {"role": "assistant", "content": answer}]})
    for c, cap in KNOWN_HELD_OUT:
        eval_known.append(convo(PHRASINGS[0].format(c=c), c, cap))
    for name, rows in (("train", train), ("eval-new", eval_new), ("eval-known", eval_known)):
        with open(os.path.join(out, name + ".jsonl"), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    ask = {"ask-new": [eval_new[i] for i in (0, 9, 17)], "ask-known": [eval_known[i] for i in (0, 4, 7)]}
    for name, rows in ask.items():
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump([{"question": r["messages"][0]["content"], "expected": r["messages"][1]["content"]}
                       for r in rows], f, indent=1)
    print(f"{len(train)} training conversations ({len(INVENTED) * 4} about invented countries"
          f"{f', {len(KNOWN_REPLAY) * replay_phrasings + len(OWN_ANSWERS)} replayed real ones' if replay_phrasings else ''}), "
          f"{len(eval_new)} held-out "
          f"questions about the invented countries, {len(eval_known)} about real ones the model knows")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0], int(args[args.index("--replay-phrasings") + 1]) if "--replay-phrasings" in args else 5)
