// Datasets in object storage (store/object_store.h): the same kinds as on disk, read
// where they lie.
//   s3://bucket/prefix/   an ImageFolder layout (data/object_folder.cc)
#ifndef FERRY_DATA_OBJECT_DATASET_H_
#define FERRY_DATA_OBJECT_DATASET_H_

#include <memory>
#include <string>

#include "data/dataset.h"
#include "store/object_store.h"

namespace ferry {

// `spec` is a URL (store::IsObjectUrl); the caller has checked it against its roots.
Result<std::unique_ptr<Dataset>> OpenObjectDataset(const std::string& spec);
Result<std::unique_ptr<Dataset>> OpenObjectImageFolder(const store::ObjectUrl& url);

}  // namespace ferry

#endif  // FERRY_DATA_OBJECT_DATASET_H_
