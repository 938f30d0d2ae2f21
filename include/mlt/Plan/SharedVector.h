//===- SharedVector.h - a list whose elements lists may share ---*- C++ -*-===//
//
// Part of mlt. The lists a plan's ranks hold (their buffers and programs).
// A plan of thousands of ranks holds the same programs on every rank of a
// pipeline stage, and the same buffers but for the blocks and slices of
// sharded tensors: the plan file writes each table once for the ranks that
// have it (PlanExport.cpp), and decoding gives those ranks one element in
// memory (Plan.cpp), so that a plan of 4096 ranks is not 4096 copies of
// its programs.
//
// A SharedVector<T> reads as a std::vector<T>. Its sharing never shows:
// only pushShared puts one element in several lists; copying a list copies
// its elements (the copy shares nothing); and any access that may write an
// element (a non-const reference: operator[], at, front, back, iteration of
// a non-const list) first gives the list its own copy of that element. So
// a list is read from any number of threads at once, as a std::vector is,
// and written from one.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_PLAN_SHAREDVECTOR_H
#define MLT_PLAN_SHAREDVECTOR_H

#include <cstddef>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace mlt::rt {

template <typename T> class SharedVector {
  template <bool Const> class Iterator;

public:
  using value_type = T;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = T &;
  using const_reference = const T &;
  using iterator = Iterator<false>;
  using const_iterator = Iterator<true>;

  SharedVector() = default;
  SharedVector(std::initializer_list<T> values) { assign(values); }
  SharedVector(const std::vector<T> &values) { assign(values); }
  SharedVector(const SharedVector &other) { copyFrom(other); }
  SharedVector(SharedVector &&other) noexcept = default;
  SharedVector &operator=(const SharedVector &other) {
    if (this != &other) {
      items_.clear();
      copyFrom(other);
    }
    return *this;
  }
  SharedVector &operator=(SharedVector &&other) noexcept = default;
  SharedVector &operator=(std::initializer_list<T> values) {
    assign(values);
    return *this;
  }
  SharedVector &operator=(const std::vector<T> &values) {
    assign(values);
    return *this;
  }
  template <typename Range> void assign(const Range &values) {
    items_.clear();
    for (const T &value : values)
      push_back(value);
  }

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  void reserve(size_t n) { items_.reserve(n); }
  void clear() { items_.clear(); }
  void pop_back() { items_.pop_back(); }
  void resize(size_t n) {
    items_.reserve(n);
    while (items_.size() < n)
      items_.push_back(std::make_shared<T>());
    items_.resize(n);
  }

  const T &operator[](size_t i) const { return *items_[i]; }
  T &operator[](size_t i) { return own(i); }
  const T &at(size_t i) const { return *items_.at(i); }
  T &at(size_t i) {
    (void)items_.at(i);
    return own(i);
  }
  const T &front() const { return *items_.front(); }
  T &front() { return own(0); }
  const T &back() const { return *items_.back(); }
  T &back() { return own(items_.size() - 1); }

  void push_back(const T &value) {
    items_.push_back(std::make_shared<T>(value));
  }
  void push_back(T &&value) {
    items_.push_back(std::make_shared<T>(std::move(value)));
  }
  template <typename... Args> T &emplace_back(Args &&...args) {
    items_.push_back(std::make_shared<T>(std::forward<Args>(args)...));
    return *items_.back();
  }
  /// Appends `element`, held with every other list it is in: read-only
  /// here until written, when this list takes its own copy.
  void pushShared(std::shared_ptr<const T> element) {
    items_.push_back(std::const_pointer_cast<T>(std::move(element)));
  }
  /// Whether element `i` is the one object that element `j` of `other` is
  /// (both pushShared): equal without comparing them.
  bool sameElement(size_t i, const SharedVector &other, size_t j) const {
    return items_[i] == other.items_[j];
  }

  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, items_.size()}; }
  const_iterator cbegin() const { return begin(); }
  const_iterator cend() const { return end(); }
  iterator begin() { return {this, 0}; }
  iterator end() { return {this, items_.size()}; }

  friend bool operator==(const SharedVector &a, const SharedVector &b) {
    if (a.size() != b.size())
      return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a.items_[i] != b.items_[i] && !(a[i] == b[i]))
        return false;
    return true;
  }
  friend bool operator!=(const SharedVector &a, const SharedVector &b) {
    return !(a == b);
  }

private:
  /// Element `i`, this list's own: copied first where others hold it.
  T &own(size_t i) {
    std::shared_ptr<T> &item = items_[i];
    if (item.use_count() > 1)
      item = std::make_shared<T>(*item);
    return *item;
  }
  void copyFrom(const SharedVector &other) {
    items_.reserve(other.items_.size());
    for (const std::shared_ptr<T> &item : other.items_)
      items_.push_back(std::make_shared<T>(*item));
  }

  template <bool Const> class Iterator {
    using List = std::conditional_t<Const, const SharedVector, SharedVector>;

  public:
    using iterator_category = std::random_access_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using pointer = std::conditional_t<Const, const T *, T *>;
    using reference = std::conditional_t<Const, const T &, T &>;

    Iterator() = default;
    Iterator(List *list, size_t index) : list_(list), index_(index) {}
    /// (a list's iterator converts to its const_iterator)
    template <bool C = Const, typename = std::enable_if_t<!C>>
    operator Iterator<true>() const {
      return {list_, index_};
    }

    reference operator*() const { return (*list_)[index_]; }
    pointer operator->() const { return &**this; }
    reference operator[](difference_type n) const {
      return (*list_)[size_t(difference_type(index_) + n)];
    }
    Iterator &operator++() {
      ++index_;
      return *this;
    }
    Iterator operator++(int) {
      Iterator old = *this;
      ++index_;
      return old;
    }
    Iterator &operator--() {
      --index_;
      return *this;
    }
    Iterator operator--(int) {
      Iterator old = *this;
      --index_;
      return old;
    }
    Iterator &operator+=(difference_type n) {
      index_ = size_t(difference_type(index_) + n);
      return *this;
    }
    Iterator &operator-=(difference_type n) { return *this += -n; }
    friend Iterator operator+(Iterator it, difference_type n) {
      return it += n;
    }
    friend Iterator operator+(difference_type n, Iterator it) {
      return it += n;
    }
    friend Iterator operator-(Iterator it, difference_type n) {
      return it -= n;
    }
    friend difference_type operator-(const Iterator &a, const Iterator &b) {
      return difference_type(a.index_) - difference_type(b.index_);
    }
    friend bool operator==(const Iterator &a, const Iterator &b) {
      return a.index_ == b.index_;
    }
    friend bool operator!=(const Iterator &a, const Iterator &b) {
      return a.index_ != b.index_;
    }
    friend bool operator<(const Iterator &a, const Iterator &b) {
      return a.index_ < b.index_;
    }
    friend bool operator>(const Iterator &a, const Iterator &b) {
      return a.index_ > b.index_;
    }
    friend bool operator<=(const Iterator &a, const Iterator &b) {
      return a.index_ <= b.index_;
    }
    friend bool operator>=(const Iterator &a, const Iterator &b) {
      return a.index_ >= b.index_;
    }

  private:
    List *list_ = nullptr;
    size_t index_ = 0;
  };

  std::vector<std::shared_ptr<T>> items_;
};

} // namespace mlt::rt

#endif // MLT_PLAN_SHAREDVECTOR_H
