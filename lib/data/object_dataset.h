// Datasets in object storage (store/object_store.h): the same kinds as on disk, read
// where they lie.
//   s3://bucket/prefix/          an ImageFolder layout (data/object_folder.cc), or
//                                .tar shards when the prefix holds only those
//   s3://b/shard-{000..127}.tar  WebDataset shards (data/tar_shards.cc reads their
//   https://host/shard-{..}.tar  members with Range requests), or a comma list of them
#ifndef FERRY_DATA_OBJECT_DATASET_H_
#define FERRY_DATA_OBJECT_DATASET_H_

#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "store/object_store.h"

namespace ferry {

class DataRoots;

// `spec` is a URL (store::IsObjectUrl): every URL it names is checked against `roots`
// before any request is sent.
Result<std::unique_ptr<Dataset>> OpenObjectDataset(const std::string& spec, const DataRoots& roots);
Result<std::unique_ptr<Dataset>> OpenObjectImageFolder(const store::ObjectUrl& url);
// The same from a listing of `root` (its key ends in '/', or is empty).
Result<std::unique_ptr<Dataset>> ObjectImageFolderOf(const store::ObjectUrl& root,
                                                     const std::vector<store::ObjectInfo>& objects);

}  // namespace ferry

#endif  // FERRY_DATA_OBJECT_DATASET_H_
