// Packing: many short documents into few rows of at most max_seq_len tokens, so a micro-batch
// computes on tokens instead of padding. Best-fit decreasing: documents longest first, each into
// the open row with the least room that still fits it (ties: the oldest row), else a new row. The
// result is a pure function of the documents' lengths, so every rank and every attempt packs the
// same way, at any world size.
//
// A packed Example keeps its documents apart with document_lengths: Collate gives each its own
// segment id and positions from 0, so attention never crosses documents and a packed row computes
// exactly what its documents would alone (tests/unit/trainer/data/packing_test.cc shows it).
#pragma once

#include <cstdint>
#include <vector>

#include "trainer/data/token_dataset.h"

namespace eft::trainer {

struct PackingStats {
  int64_t documents = 0;
  int64_t rows = 0;
  int64_t tokens = 0;
  // tokens / (rows x max_seq_len): the share of a full micro-batch that is not padding.
  double efficiency() const;
  int64_t max_seq_len = 0;
};

// Which documents go into which row: rows[r] lists document indices in the order they sit in row r.
// Every document must be 1..max_seq_len tokens long (std::invalid_argument otherwise).
std::vector<std::vector<int64_t>> PackBestFitDecreasing(const std::vector<int64_t>& lengths, int64_t max_seq_len);

// The packed dataset: one Example per row, its documents concatenated with their labels and
// document_lengths set. Stats are filled when given.
TokenDataset PackDataset(const TokenDataset& documents, int64_t max_seq_len, PackingStats* stats = nullptr);

}  // namespace eft::trainer
