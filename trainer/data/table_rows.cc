#include "trainer/data/table_rows.h"

#ifdef EFT_HAVE_ARROW
#include <arrow/api.h>
#include <arrow/extension_type.h>
#include <arrow/io/file.h>
#include <arrow/ipc/reader.h>
#include <parquet/arrow/reader.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>
#endif

namespace eft::trainer {

#ifndef EFT_HAVE_ARROW

bool HaveArrow() { return false; }

Result<bool> TableRows::Next(nlohmann::ordered_json*) { return false; }

Result<std::unique_ptr<TableRows>> TableRows::Open(const std::string& path, DataFileKind kind) {
  return Status::FailedPrecondition(path + ": a " + DataFileKindName(kind) +
                                    " file, and this eft-train was built without Arrow/Parquet (configure with the "
                                    "pinned pyarrow in the Python that provides LibTorch: docs/data.md)");
}

#else

namespace {

using ojson = nlohmann::ordered_json;

template <typename A>
const A& As(const arrow::Array& a) {
  return static_cast<const A&>(a);
}

template <typename ListArray>
ojson ListCell(const ListArray& list, int64_t i);

ojson Cell(const arrow::Array& a, int64_t i) {
  if (a.IsNull(i)) return nullptr;
  switch (a.type_id()) {
    case arrow::Type::NA: return nullptr;
    case arrow::Type::BOOL: return As<arrow::BooleanArray>(a).Value(i);
    case arrow::Type::INT8: return int64_t{As<arrow::Int8Array>(a).Value(i)};
    case arrow::Type::INT16: return int64_t{As<arrow::Int16Array>(a).Value(i)};
    case arrow::Type::INT32: return int64_t{As<arrow::Int32Array>(a).Value(i)};
    case arrow::Type::INT64: return int64_t{As<arrow::Int64Array>(a).Value(i)};
    case arrow::Type::UINT8: return uint64_t{As<arrow::UInt8Array>(a).Value(i)};
    case arrow::Type::UINT16: return uint64_t{As<arrow::UInt16Array>(a).Value(i)};
    case arrow::Type::UINT32: return uint64_t{As<arrow::UInt32Array>(a).Value(i)};
    case arrow::Type::UINT64: return uint64_t{As<arrow::UInt64Array>(a).Value(i)};
    case arrow::Type::FLOAT: return double{As<arrow::FloatArray>(a).Value(i)};
    case arrow::Type::DOUBLE: return As<arrow::DoubleArray>(a).Value(i);
    case arrow::Type::STRING: return std::string(As<arrow::StringArray>(a).GetView(i));
    case arrow::Type::LARGE_STRING: return std::string(As<arrow::LargeStringArray>(a).GetView(i));
    case arrow::Type::STRING_VIEW: return std::string(As<arrow::StringViewArray>(a).GetView(i));
    case arrow::Type::LIST: return ListCell(As<arrow::ListArray>(a), i);
    case arrow::Type::LARGE_LIST: return ListCell(As<arrow::LargeListArray>(a), i);
    case arrow::Type::FIXED_SIZE_LIST: return ListCell(As<arrow::FixedSizeListArray>(a), i);
    case arrow::Type::STRUCT: {
      const auto& s = As<arrow::StructArray>(a);
      ojson obj = ojson::object();
      for (int k = 0; k < s.num_fields(); ++k) obj[s.struct_type()->field(k)->name()] = Cell(*s.field(k), i);
      return obj;
    }
    case arrow::Type::MAP: {
      const auto& m = As<arrow::MapArray>(a);
      const int64_t begin = m.value_offset(i), end = begin + m.value_length(i);
      const bool string_keys = m.keys()->type_id() == arrow::Type::STRING ||
                               m.keys()->type_id() == arrow::Type::LARGE_STRING;
      ojson out = string_keys ? ojson::object() : ojson::array();
      for (int64_t k = begin; k < end; ++k) {
        ojson key = Cell(*m.keys(), k), value = Cell(*m.items(), k);
        if (string_keys && key.is_string()) {
          out[key.get<std::string>()] = std::move(value);
        } else {
          out.push_back(ojson::array({std::move(key), std::move(value)}));
        }
      }
      return out;
    }
    case arrow::Type::EXTENSION: {
      // datasets writes values of no fixed shape (messages whose keys differ, a tool's parameters)
      // as the canonical arrow.json extension: JSON text in a string array.
      const auto& e = As<arrow::ExtensionArray>(a);
      ojson value = Cell(*e.storage(), i);
      if (e.extension_type()->extension_name() == "arrow.json" && value.is_string()) {
        ojson parsed = ojson::parse(value.get_ref<const std::string&>(), nullptr, /*allow_exceptions=*/false);
        if (!parsed.is_discarded()) return parsed;
      }
      return value;
    }
    case arrow::Type::DICTIONARY: {
      const auto& d = As<arrow::DictionaryArray>(a);
      return Cell(*d.dictionary(), d.GetValueIndex(i));
    }
    default: {
      auto scalar = a.GetScalar(i);
      return scalar.ok() ? (*scalar)->ToString() : std::string();
    }
  }
}

template <typename ListArray>
ojson ListCell(const ListArray& list, int64_t i) {
  const int64_t begin = list.value_offset(i), end = begin + list.value_length(i);
  ojson out = ojson::array();
  for (int64_t k = begin; k < end; ++k) out.push_back(Cell(*list.values(), k));
  return out;
}

void RowOf(const arrow::RecordBatch& batch, int64_t r, ojson* row) {
  *row = ojson::object();
  for (int c = 0; c < batch.num_columns(); ++c) (*row)[batch.column_name(c)] = Cell(*batch.column(c), r);
}

Status Loss(const std::string& what, const arrow::Status& s) { return Status::DataLoss(what + ": " + s.message()); }

// Parquet: row group by row group, kBatchRows rows at a time.
class ParquetRows final : public TableRows {
 public:
  Status Init(const std::string& path) {
    auto file = arrow::io::ReadableFile::Open(path);
    if (!file.ok()) return Status::NotFound("cannot open: " + file.status().message());
    parquet::arrow::FileReaderBuilder builder;
    // Pages written with checksums (pyarrow's write_page_checksum) are checked: damage that would
    // otherwise decode into different text is found.
    parquet::ReaderProperties read = parquet::default_reader_properties();
    read.set_page_checksum_verification(true);
    arrow::Status s = builder.Open(*file, read);
    if (!s.ok()) return Loss("not a readable Parquet file", s);
    parquet::ArrowReaderProperties properties;
    properties.set_batch_size(kBatchRows);
    builder.properties(properties);
    auto reader = builder.Build();
    if (!reader.ok()) return Loss("not a readable Parquet file", reader.status());
    reader_ = std::move(*reader);
    metadata_ = reader_->parquet_reader()->metadata();
    return Status::Ok();
  }

  Result<bool> NextRow(ojson* row) override {
    while (!batch_ || pos_ >= batch_->num_rows()) {
      if (!group_) {
        if (group_index_ >= metadata_->num_row_groups()) return false;
        auto g = reader_->GetRecordBatchReader(std::vector<int>{group_index_});
        if (!g.ok()) return Loss(PartAndColumn(), g.status());
        group_ = std::move(*g);
        in_group_ = 0;
      }
      arrow::Status s;
      try {
        s = group_->ReadNext(&batch_);
      } catch (const std::exception& e) {
        s = arrow::Status::IOError(e.what());
      }
      if (!s.ok()) return Loss(PartAndColumn(), s);
      if (!batch_) {
        group_.reset();
        ++group_index_;
        continue;
      }
      pos_ = 0;
    }
    RowOf(*batch_, pos_++, row);
    ++in_group_;
    ++rows_read_;
    return true;
  }

  int64_t SkipPart() override {
    int64_t left = -1;
    if (group_index_ < metadata_->num_row_groups()) left = metadata_->RowGroup(group_index_)->num_rows() - in_group_;
    group_.reset();
    batch_.reset();
    ++group_index_;
    in_group_ = 0;
    if (left > 0) rows_read_ += left;
    return left;
  }
  std::string Where() const override { return Part() + ", row " + std::to_string(rows_read_ - 1); }
  int64_t total_rows() const override { return metadata_->num_rows(); }
  int64_t rows_read() const override { return rows_read_; }

  std::string Part() const override { return "row group " + std::to_string(group_index_); }

 private:
  // The row group and, read column by column (one column of one group: bounded), the first column
  // that cannot be decoded: what a user needs to find the damage.
  std::string PartAndColumn() {
    std::shared_ptr<arrow::Schema> schema;
    if (reader_->GetSchema(&schema).ok()) {
      for (int c = 0; c < schema->num_fields(); ++c) {
        std::shared_ptr<arrow::ChunkedArray> column;
        bool ok = false;
        try {
          ok = reader_->RowGroup(group_index_)->Column(c)->Read(&column).ok();
        } catch (const std::exception&) {
        }
        if (!ok) return Part() + ", column " + schema->field(c)->name();
      }
    }
    return Part();
  }


  std::unique_ptr<parquet::arrow::FileReader> reader_;
  std::shared_ptr<parquet::FileMetaData> metadata_;
  std::unique_ptr<arrow::RecordBatchReader> group_;
  std::shared_ptr<arrow::RecordBatch> batch_;
  int group_index_ = 0;
  int64_t pos_ = 0, in_group_ = 0, rows_read_ = 0;
};

// An Arrow IPC stream (save_to_disk's shards) or file, record batch by record batch.
class ArrowRows final : public TableRows {
 public:
  Status Init(const std::string& path, bool stream) {
    auto file = arrow::io::ReadableFile::Open(path);
    if (!file.ok()) return Status::NotFound("cannot open: " + file.status().message());
    if (stream) {
      auto r = arrow::ipc::RecordBatchStreamReader::Open(*file);
      if (!r.ok()) return Loss("not a readable Arrow stream", r.status());
      stream_ = std::move(*r);
    } else {
      auto r = arrow::ipc::RecordBatchFileReader::Open(*file);
      if (!r.ok()) return Loss("not a readable Arrow file", r.status());
      file_ = std::move(*r);
      auto rows = file_->CountRows();
      total_ = rows.ok() ? *rows : -1;
    }
    return Status::Ok();
  }

  Result<bool> NextRow(ojson* row) override {
    while (!batch_ || pos_ >= batch_->num_rows()) {
      if (done_) return false;
      if (batch_) ++batch_index_;
      batch_.reset();
      if (stream_) {
        arrow::Status s = stream_->ReadNext(&batch_);
        if (!s.ok()) return Loss(Part(), s);
      } else if (batch_index_ < file_->num_record_batches()) {
        auto b = file_->ReadRecordBatch(batch_index_);
        if (!b.ok()) return Loss(Part(), b.status());
        batch_ = std::move(*b);
      }
      if (!batch_) {
        done_ = true;
        return false;
      }
      pos_ = 0;
    }
    RowOf(*batch_, pos_++, row);
    ++rows_read_;
    return true;
  }

  int64_t SkipPart() override {
    batch_.reset();
    if (stream_) {
      done_ = true;  // a stream cannot be resynchronized after a bad message
    } else {
      ++batch_index_;
    }
    return -1;
  }
  std::string Where() const override { return Part() + ", row " + std::to_string(rows_read_ - 1); }
  int64_t total_rows() const override { return total_; }
  int64_t rows_read() const override { return rows_read_; }

  std::string Part() const override { return "record batch " + std::to_string(batch_index_); }

 private:

  std::shared_ptr<arrow::ipc::RecordBatchStreamReader> stream_;
  std::shared_ptr<arrow::ipc::RecordBatchFileReader> file_;
  std::shared_ptr<arrow::RecordBatch> batch_;
  int batch_index_ = 0;
  int64_t pos_ = 0, rows_read_ = 0, total_ = -1;
  bool done_ = false;
};

}  // namespace

bool HaveArrow() { return true; }

Result<bool> TableRows::Next(ojson* row) {
  try {
    return NextRow(row);
  } catch (const std::exception& e) {  // Parquet's decoders report some damage by throwing
    return Status::DataLoss(Part() + ": " + e.what());
  }
}

Result<std::unique_ptr<TableRows>> TableRows::Open(const std::string& path, DataFileKind kind) {
  try {
    if (kind == DataFileKind::kParquet) {
      auto rows = std::make_unique<ParquetRows>();
      EFT_RETURN_IF_ERROR(rows->Init(path).WithContext(path));
      return std::unique_ptr<TableRows>(std::move(rows));
    }
    if (kind == DataFileKind::kArrowFile || kind == DataFileKind::kArrowStream) {
      auto rows = std::make_unique<ArrowRows>();
      EFT_RETURN_IF_ERROR(rows->Init(path, kind == DataFileKind::kArrowStream).WithContext(path));
      return std::unique_ptr<TableRows>(std::move(rows));
    }
  } catch (const std::exception& e) {  // parquet::ParquetException from the footer's decoding
    return Status::DataLoss(path + ": not readable as " + DataFileKindName(kind) + ": " + e.what());
  }
  return Status::InvalidArgument(path + ": not a table file");
}

#endif  // EFT_HAVE_ARROW

}  // namespace eft::trainer
