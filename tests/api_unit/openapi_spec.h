#pragma once
// The operations of api/openapi.yaml as the route tests check deskboxd against them: method,
// path, operationId, who may call each (security, x-scopes, x-token-in-query) and the response
// codes it documents. Read at test time from DESKBOX_OPENAPI (a compile definition: the path of
// the spec in the source tree).
#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace deskbox::api::testing {

struct SpecOperation {
  std::string method;               // "GET"
  std::string path;                 // "/v1/sandboxes/{id}"
  std::string id;                   // operationId
  bool open = false;                // security: [] (no credential at all)
  std::vector<std::string> scopes;  // x-scopes: the token scopes it takes ([]: API keys only)
  bool token_in_query = false;      // x-token-in-query
  std::set<unsigned> codes;         // the response codes it documents
};

// The operations of openapi.yaml, read line by line: under `paths:`, "  /path:", then
// "    <method>:", and below a method its operationId, security, x-scopes, x-token-in-query
// and its responses' "        "NNN":" lines. No YAML library: the file's layout is regular.
inline std::vector<SpecOperation> ReadSpec(const std::string& file) {
  static const std::set<std::string> kMethods = {"get",   "put",  "post",   "delete",
                                                 "patch", "head", "options"};
  std::ifstream in(file);
  std::vector<SpecOperation> ops;
  std::string line, path;
  bool in_paths = false, in_operation = false;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] != ' ') {
      in_paths = line == "paths:";
      continue;
    }
    size_t indent = line.find_first_not_of(' ');
    if (!in_paths || indent == std::string::npos) continue;
    std::string rest = line.substr(indent);
    if (indent == 2 && rest.starts_with('/') && rest.ends_with(':')) {
      path = rest.substr(0, rest.size() - 1);
      in_operation = false;
    } else if (indent == 4 && rest.ends_with(':')) {
      std::string method = rest.substr(0, rest.size() - 1);
      in_operation = kMethods.count(method) > 0;
      if (in_operation) {
        std::transform(method.begin(), method.end(), method.begin(), ::toupper);
        ops.push_back({.method = method, .path = path});
      }
    } else if (in_operation && indent == 6) {
      SpecOperation& op = ops.back();
      if (rest.starts_with("operationId: ")) op.id = rest.substr(13);
      if (rest == "security: []") op.open = true;
      if (rest == "x-token-in-query: true") op.token_in_query = true;
      if (rest.starts_with("x-scopes: [") && rest.ends_with(']')) {
        std::string list = rest.substr(11, rest.size() - 12);
        for (size_t start = 0; start < list.size();) {
          size_t end = std::min(list.find(',', start), list.size());
          std::string scope = list.substr(start, end - start);
          scope.erase(0, scope.find_first_not_of(' '));
          if (!scope.empty()) op.scopes.push_back(scope);
          start = end + 1;
        }
      }
    } else if (in_operation && indent == 8 && rest.size() >= 6 && rest[0] == '"' &&
               rest[4] == '"' && rest[5] == ':') {
      ops.back().codes.insert(static_cast<unsigned>(std::stoul(rest.substr(1, 3))));
    }
  }
  return ops;
}

inline const std::vector<SpecOperation>& Spec() {
  static const std::vector<SpecOperation> spec = ReadSpec(DESKBOX_OPENAPI);
  return spec;
}

inline const SpecOperation* FindOperation(const std::string& id) {
  for (const auto& op : Spec())
    if (op.id == id) return &op;
  return nullptr;
}

}  // namespace deskbox::api::testing
