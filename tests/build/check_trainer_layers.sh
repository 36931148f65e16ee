#!/usr/bin/env bash
# The trainer's folders are layers (docs/architecture.md, "Trainer"): a folder includes only folders
# listed before it here, so nothing below train/ reaches back into the loop, and the model knows
# nothing of sharding. Usage: check_trainer_layers.sh SOURCE_DIR
set -euo pipefail
src=$1
layers=(runtime tracking kernels io data chat_template tokenizer optim model parallel checkpoint export train generate)
status=0
for ((i = 0; i < ${#layers[@]}; i++)); do
  folder=${layers[$i]}
  allowed=" ${layers[*]:0:$i} $folder "
  [[ -d "$src/trainer/$folder" ]] || { echo "trainer/$folder is listed here but does not exist" >&2; exit 1; }
  while IFS= read -r line; do
    file=${line%%:*}
    target=$(sed -E 's/.*#include "trainer\/([a-z_]+)\/.*/\1/' <<<"$line")
    if [[ "$allowed" != *" $target "* ]]; then
      echo "${file#"$src"/} includes trainer/$target/, a layer above trainer/$folder/" >&2
      status=1
    fi
  done < <(grep -rHn '#include "trainer/' "$src/trainer/$folder" || true)
done
for dir in "$src"/trainer/*/; do
  name=$(basename "$dir")
  [[ " ${layers[*]} " == *" $name "* ]] || { echo "trainer/$name/ is in no layer: add it to $0" >&2; status=1; }
done
exit $status
