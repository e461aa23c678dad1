// Loading op plugins (include/ferry/plugin.h): dlopen, the plugin's ferry_plugin_init,
// and each op it registers wrapped as an Op of the registry.
#ifndef FERRY_OPS_PLUGIN_H_
#define FERRY_OPS_PLUGIN_H_

#include <string>
#include <vector>

#include "ferry/status.h"

namespace ferry {

// Loads the plugin at `path` (once: a second call for the same file does nothing).
// InvalidArgument naming the file for a library that does not load, lacks
// ferry_plugin_init, was built for another ABI, fails its init, or registers a name
// that is taken or malformed (then none of its ops is kept).
Status LoadPlugin(const std::string& path);
// Each of `paths` (entries may be ':'-separated lists), and $FERRY_PLUGIN's.
Status LoadPlugins(const std::vector<std::string>& paths);

}  // namespace ferry

#endif  // FERRY_OPS_PLUGIN_H_
