#include "trainer/data/packing.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>

namespace eft::trainer {

double PackingStats::efficiency() const {
  return rows == 0 || max_seq_len == 0 ? 0.0 : static_cast<double>(tokens) / static_cast<double>(rows * max_seq_len);
}

std::vector<std::vector<int64_t>> PackBestFitDecreasing(const std::vector<int64_t>& lengths, int64_t max_seq_len) {
  std::vector<int64_t> order(lengths.size());
  std::iota(order.begin(), order.end(), 0);
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 1 || lengths[i] > max_seq_len) {
      throw std::invalid_argument("PackBestFitDecreasing: document " + std::to_string(i) + " has " +
                                  std::to_string(lengths[i]) + " tokens, max_seq_len is " + std::to_string(max_seq_len));
    }
  }
  // Longest first; equal lengths keep their dataset order, so the result never depends on the sort.
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });
  std::vector<std::vector<int64_t>> rows;
  std::set<std::pair<int64_t, int64_t>> room;  // (free tokens, row): the best fit is lower_bound(length)
  for (int64_t doc : order) {
    const int64_t len = lengths[static_cast<size_t>(doc)];
    auto it = room.lower_bound({len, -1});
    if (it == room.end()) {
      rows.push_back({doc});
      if (max_seq_len - len > 0) room.insert({max_seq_len - len, static_cast<int64_t>(rows.size()) - 1});
      continue;
    }
    const auto [free, row] = *it;
    room.erase(it);
    rows[static_cast<size_t>(row)].push_back(doc);
    if (free - len > 0) room.insert({free - len, row});
  }
  return rows;
}

TokenDataset PackDataset(const TokenDataset& documents, int64_t max_seq_len, PackingStats* stats) {
  std::vector<int64_t> lengths;
  lengths.reserve(static_cast<size_t>(documents.size()));
  for (int64_t i = 0; i < documents.size(); ++i) lengths.push_back(static_cast<int64_t>(documents[i].input_ids.size()));
  std::vector<std::vector<int64_t>> rows = PackBestFitDecreasing(lengths, max_seq_len);
  TokenDataset::Builder packed;
  int64_t tokens = 0;
  std::vector<int64_t> document_lengths;
  for (const auto& row : rows) {
    document_lengths.clear();
    for (int64_t doc : row) {
      const ExampleView d = documents[doc];
      packed.Append(d.input_ids, d.labels);
      document_lengths.push_back(static_cast<int64_t>(d.input_ids.size()));
      tokens += static_cast<int64_t>(d.input_ids.size());
    }
    packed.EndRow(document_lengths);
  }
  if (stats) {
    stats->documents = documents.size();
    stats->rows = static_cast<int64_t>(rows.size());
    stats->tokens = tokens;
    stats->max_seq_len = max_seq_len;
  }
  return packed.Finish();
}

}  // namespace eft::trainer
