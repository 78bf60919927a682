#include "engine/graph/subgraph.h"

#include <mutex>
#include <unordered_map>
#include <utility>

namespace tiny {

namespace {

struct CallValues {
  std::vector<StoredValue> values;
  std::unordered_map<const Node*, size_t> at;  // each value's place
};
struct Kept {
  std::mutex mutex;
  std::unordered_map<const Node*, CallValues> by_call;  // calls that keep values
};
Kept& kept() {
  static Kept* k = new Kept();
  return *k;
}

}  // namespace

void keep_stored_values(const Node* call) {
  std::lock_guard<std::mutex> g(kept().mutex);
  kept().by_call.emplace(call, CallValues());
}

bool keeps_stored_values(const Node* call) {
  std::lock_guard<std::mutex> g(kept().mutex);
  return kept().by_call.count(call) > 0;
}

void store_value(const Node* call, const StoredValue& value) {
  BufferRef replaced;  // (freed outside the lock)
  std::lock_guard<std::mutex> g(kept().mutex);
  auto it = kept().by_call.find(call);
  if (it == kept().by_call.end()) return;
  CallValues& c = it->second;
  auto [at, added] = c.at.emplace(value.node, c.values.size());
  if (added) c.values.push_back(value);
  else replaced = std::exchange(c.values[at->second].buffer, value.buffer);
}

std::vector<StoredValue> stored_values(const Node* call) {
  std::lock_guard<std::mutex> g(kept().mutex);
  auto it = kept().by_call.find(call);
  return it == kept().by_call.end() ? std::vector<StoredValue>() : it->second.values;
}

void forget_call(const Node* call) {
  CallValues dying;  // (its buffers freed outside the lock)
  std::lock_guard<std::mutex> g(kept().mutex);
  auto it = kept().by_call.find(call);
  if (it == kept().by_call.end()) return;
  dying = std::move(it->second);
  kept().by_call.erase(it);
}

}  // namespace tiny
