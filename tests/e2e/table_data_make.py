"""Writes the rows of a JSONL file as the files users bring (docs/data.md, "Files and formats"),
with the libraries they come from: datasets (load_dataset("json"), to_parquet, save_to_disk) and
pyarrow. table_data_test.cc then checks that eft-train tokenizes each as it does the JSONL.

  table_data_make.py SRC.jsonl OUT_DIR

OUT_DIR/one.parquet        one file, several row groups (4 rows each)
OUT_DIR/shards/            three Parquet shards named as a hub dataset's data/ folder names them
OUT_DIR/saved/             save_to_disk, two Arrow stream shards (state.json gives their order)
OUT_DIR/table.arrow        an Arrow IPC file (pyarrow.ipc.new_file)
OUT_DIR/dict/              a DatasetDict saved with save_to_disk (its splits: train)
OUT_DIR/no_messages.parquet    the rows without their messages column
OUT_DIR/string_messages.parquet  messages as JSON text (a string column)
OUT_DIR/checksummed.parquet      one.parquet with page checksums, a byte of row group 1 damaged
OUT_DIR/truncated.parquet        half of one.parquet (its footer gone)
OUT_DIR/truncated_saved/         saved/ with its second shard cut in half
"""
import json
import os
import shutil
import sys

import datasets
import pyarrow as pa
import pyarrow.parquet as pq


def main():
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    datasets.disable_progress_bars()
    ds = datasets.load_dataset("json", data_files=src, split="train", cache_dir=os.path.join(out, ".hf-cache"))
    n = len(ds)

    ds.to_parquet(os.path.join(out, "one.parquet"), batch_size=4)
    assert pq.ParquetFile(os.path.join(out, "one.parquet")).num_row_groups == (n + 3) // 4

    # Shards as the hub's parquet conversion writes them (datasets' own shard().to_parquet() cannot
    # write its arrow.json extension columns, e.g. a tool's free-form "parameters").
    os.makedirs(os.path.join(out, "shards"), exist_ok=True)
    table = ds.data.table
    cut = [0, n // 3, 2 * n // 3, n]
    for i in range(3):
        pq.write_table(table.slice(cut[i], cut[i + 1] - cut[i]),
                       os.path.join(out, "shards", f"train-{i:05d}-of-00003.parquet"))

    ds.save_to_disk(os.path.join(out, "saved"), num_shards=2)
    with pa.OSFile(os.path.join(out, "table.arrow"), "wb") as f:
        with pa.ipc.new_file(f, table.schema) as w:
            for batch in table.to_batches(max_chunksize=5):
                w.write_batch(batch)
    datasets.DatasetDict({"train": ds}).save_to_disk(os.path.join(out, "dict"))

    if "messages" in ds.column_names:
        ds.remove_columns("messages").to_parquet(os.path.join(out, "no_messages.parquet"))
        rows = [json.loads(line) for line in open(src) if line.strip()]
        pq.write_table(pa.table({"messages": [json.dumps(r["messages"]) for r in rows]}),
                       os.path.join(out, "string_messages.parquet"))

    # Damage that only a checksum can tell from data: one byte inside row group 1's first page.
    path = os.path.join(out, "checksummed.parquet")
    pq.write_table(table, path, row_group_size=4, write_page_checksum=True, compression="none")
    meta = pq.ParquetFile(path).metadata
    column = meta.row_group(1).column(0)  # the first column's first leaf (messages)
    start = column.dictionary_page_offset if column.has_dictionary_page else column.data_page_offset
    offset = start + column.total_compressed_size // 2
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x55]))

    whole = open(os.path.join(out, "one.parquet"), "rb").read()
    open(os.path.join(out, "truncated.parquet"), "wb").write(whole[: len(whole) // 2])
    shutil.copytree(os.path.join(out, "saved"), os.path.join(out, "truncated_saved"))
    second = os.path.join(out, "truncated_saved", "data-00001-of-00002.arrow")
    data = open(second, "rb").read()
    open(second, "wb").write(data[: len(data) // 2])
    print(json.dumps({"rows": n, "row_groups": meta.num_row_groups}))


if __name__ == "__main__":
    main()
