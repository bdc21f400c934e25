// A map with a capacity that forgets its least recently used entry to make room: caches whose
// keys are unbounded (one oneDNN primitive per distinct batch size) but whose memory must not be.
//
// Find marks the entry as the most recently used; Insert adds one (or replaces the value of an
// existing key) as the most recently used and evicts from the other end while over capacity.
// A capacity of 0 keeps nothing. Values are returned by copy, so an evicted value stays valid
// for whoever holds a copy (oneDNN primitives are reference-counted handles).
//
// Thread-safety: none; the owner locks.
#pragma once

#include <cstddef>
#include <iterator>
#include <list>
#include <map>
#include <optional>
#include <utility>

namespace tandem {

template <typename Key, typename Value, typename Less = std::less<Key>>
class LruMap {
 public:
  explicit LruMap(size_t capacity) : capacity_(capacity) {}

  std::optional<Value> Find(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return std::nullopt;
    order_.splice(order_.begin(), order_, it->second);  // most recently used first
    return it->second->second;
  }

  void Insert(const Key& key, Value value) {
    auto it = index_.find(key);
    if (it != index_.end()) {
      it->second->second = std::move(value);
      order_.splice(order_.begin(), order_, it->second);
    } else {
      order_.emplace_front(key, std::move(value));
      index_.emplace(key, order_.begin());
    }
    Trim();
  }

  void set_capacity(size_t capacity) {
    capacity_ = capacity;
    Trim();
  }
  size_t capacity() const { return capacity_; }
  size_t size() const { return index_.size(); }
  // Entries dropped to make room since construction.
  size_t evictions() const { return evictions_; }

 private:
  void Trim() {
    while (index_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
      ++evictions_;
    }
  }

  size_t capacity_;
  size_t evictions_ = 0;
  std::list<std::pair<Key, Value>> order_;  // most recently used first
  std::map<Key, typename std::list<std::pair<Key, Value>>::iterator, Less> index_;
};

}  // namespace tandem
