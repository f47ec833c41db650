#include "coordinator/leases.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pstrain {

namespace {

std::string Silence(const ExpiredLease& e, absl::Duration lease) {
  std::string what = absl::StrFormat("silent for %.1f s (network.lease_s = %g)",
                                     absl::ToDoubleSeconds(e.silent),
                                     absl::ToDoubleSeconds(lease));
  if (e.has_step) absl::StrAppend(&what, "; last step ", e.step);
  return what;
}

}  // namespace

std::string ExpiredLease::Describe(absl::Duration lease) const {
  std::string what = absl::StrCat(
      holder == LeaseHolder::kServer ? "server shard " : "worker ", id);
  if (!address.empty()) absl::StrAppend(&what, " at ", address);
  return absl::StrCat(what, " is dead: ", Silence(*this, lease));
}

std::string ExpiredLease::Cause(absl::Duration lease) const {
  return absl::StrCat(
      "dead", address.empty() ? "" : absl::StrCat(" (at ", address, ")"), ": ",
      Silence(*this, lease));
}

LeaseTable::LeaseTable(int num_servers, int num_workers, absl::Duration lease)
    : lease_(lease),
      servers_(std::max(num_servers, 0)),
      workers_(std::max(num_workers, 0)) {}

std::vector<LeaseTable::Entry>* LeaseTable::Of(LeaseHolder holder) {
  return holder == LeaseHolder::kServer ? &servers_ : &workers_;
}

void LeaseTable::Hold(LeaseHolder holder, int id, absl::Time now,
                      const std::string& address) {
  std::vector<Entry>* entries = Of(holder);
  if (id < 0 || id >= static_cast<int>(entries->size())) return;
  Entry& e = (*entries)[id];
  e.held = true;
  e.last = std::max(e.last, now);
  e.address = address;
}

void LeaseTable::Renew(LeaseHolder holder, int id, absl::Time now,
                       std::optional<uint64_t> step) {
  std::vector<Entry>* entries = Of(holder);
  if (id < 0 || id >= static_cast<int>(entries->size())) return;
  Entry& e = (*entries)[id];
  if (!e.held) return;
  e.last = std::max(e.last, now);
  if (step.has_value() && (!e.has_step || *step > e.step)) {
    e.step = *step;
    e.has_step = true;
  }
}

std::optional<uint64_t> LeaseTable::Step(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(workers_.size()) ||
      !workers_[rank].has_step) {
    return std::nullopt;
  }
  return workers_[rank].step;
}

bool LeaseTable::Held(LeaseHolder holder, int id) const {
  const std::vector<Entry>& entries =
      holder == LeaseHolder::kServer ? servers_ : workers_;
  return id >= 0 && id < static_cast<int>(entries.size()) && entries[id].held;
}

void LeaseTable::Release(LeaseHolder holder, int id) {
  std::vector<Entry>* entries = Of(holder);
  if (id < 0 || id >= static_cast<int>(entries->size())) return;
  (*entries)[id].held = false;
}

void LeaseTable::ReleaseAll() {
  for (Entry& e : servers_) e.held = false;
  for (Entry& e : workers_) e.held = false;
}

std::optional<ExpiredLease> LeaseTable::Expired(absl::Time now) const {
  std::optional<ExpiredLease> worst;
  auto scan = [&](const std::vector<Entry>& entries, LeaseHolder holder) {
    for (size_t i = 0; i < entries.size(); ++i) {
      const Entry& e = entries[i];
      const absl::Duration silent = now - e.last;
      if (!e.held || silent <= lease_) continue;
      if (worst.has_value() && silent <= worst->silent) continue;
      worst = ExpiredLease{holder, static_cast<int>(i), e.address,
                           e.step, e.has_step,          silent};
    }
  };
  scan(servers_, LeaseHolder::kServer);
  scan(workers_, LeaseHolder::kWorker);
  return worst;
}

}  // namespace pstrain
