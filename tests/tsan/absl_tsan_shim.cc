// ThreadSanitizer support for Debian's uninstrumented Abseil (--config=tsan).
//
// libabsl_synchronization.so is built without -fsanitize=thread, so TSan
// cannot see absl::Mutex, CondVar and Notification synchronise anything, and
// it would report every access guarded by them as a race. This file, linked
// into every binary of the tsan build (.bazelrc: --custom_malloc), defines
// those functions in the executable, which takes precedence over the shared
// library (symbol interposition): each calls the library's own function
// (dlsym RTLD_NEXT) and tells TSan what it did, __tsan_acquire after taking
// a mutex or seeing a notification, __tsan_release before giving one up or
// notifying. Happens-before is all TSan needs from these; the lock-order
// (deadlock) detector does not see absl mutexes.
//
// The mangled names are Debian 12's (Abseil LTS 2022-06-23, inline namespace
// debian3); a missing one aborts with its name rather than hiding races.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace {

void* Real(const char* mangled) {
  void* f = dlsym(RTLD_NEXT, mangled);
  if (f == nullptr) {
    std::fprintf(stderr, "absl_tsan_shim: no %s in the Abseil library\n",
                 mangled);
    std::abort();
  }
  return f;
}

template <typename F>
F RealFn(const char* mangled) {
  return reinterpret_cast<F>(Real(mangled));
}

#define PS_REAL(type, mangled) static const auto real = RealFn<type>(mangled)

void Acquire(const void* p) { __tsan_acquire(const_cast<void*>(p)); }
void Release(const void* p) { __tsan_release(const_cast<void*>(p)); }

// Abseil evaluates a Condition inside its own (uninstrumented) code, while
// holding the mutex, in the waiting thread or in whichever thread unlocks.
// Wrapping it tells TSan the evaluation holds the mutex.
struct Guarded {
  const absl::Condition* cond;
  const absl::Mutex* mu;
};
bool EvalGuarded(Guarded* g) {
  Acquire(g->mu);
  const bool r = g->cond->Eval();
  Release(g->mu);
  return r;
}

}  // namespace

namespace absl {

using C = const Condition&;

void Mutex::Lock() {
  PS_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex4LockEv");
  real(this);
  Acquire(this);
}
void Mutex::ReaderLock() {
  PS_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex10ReaderLockEv");
  real(this);
  Acquire(this);
}
bool Mutex::TryLock() {
  PS_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex7TryLockEv");
  const bool ok = real(this);
  if (ok) Acquire(this);
  return ok;
}
bool Mutex::ReaderTryLock() {
  PS_REAL(bool (*)(Mutex*), "_ZN4absl7debian35Mutex13ReaderTryLockEv");
  const bool ok = real(this);
  if (ok) Acquire(this);
  return ok;
}
void Mutex::Unlock() {
  PS_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex6UnlockEv");
  Release(this);
  real(this);
}
void Mutex::ReaderUnlock() {
  PS_REAL(void (*)(Mutex*), "_ZN4absl7debian35Mutex12ReaderUnlockEv");
  Release(this);
  real(this);
}
void Mutex::LockWhen(C cond_in) {
  Guarded g{&cond_in, this};
  const Condition cond(&EvalGuarded, &g);
  PS_REAL(void (*)(Mutex*, C),
          "_ZN4absl7debian35Mutex8LockWhenERKNS0_9ConditionE");
  real(this, cond);
  Acquire(this);
}
void Mutex::ReaderLockWhen(C cond_in) {
  Guarded g{&cond_in, this};
  const Condition cond(&EvalGuarded, &g);
  PS_REAL(void (*)(Mutex*, C),
          "_ZN4absl7debian35Mutex14ReaderLockWhenERKNS0_9ConditionE");
  real(this, cond);
  Acquire(this);
}
bool Mutex::LockWhenWithTimeout(C cond_in, Duration timeout) {
  Guarded g{&cond_in, this};
  const Condition cond(&EvalGuarded, &g);
  PS_REAL(bool (*)(Mutex*, C, Duration),
          "_ZN4absl7debian35Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_"
          "8DurationE");
  const bool r = real(this, cond, timeout);
  Acquire(this);  // held on return either way
  return r;
}
bool Mutex::LockWhenWithDeadline(C cond_in, Time deadline) {
  Guarded g{&cond_in, this};
  const Condition cond(&EvalGuarded, &g);
  PS_REAL(bool (*)(Mutex*, C, Time),
          "_ZN4absl7debian35Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_"
          "4TimeE");
  const bool r = real(this, cond, deadline);
  Acquire(this);
  return r;
}
bool Mutex::ReaderLockWhenWithTimeout(C cond_in, Duration timeout) {
  Guarded g{&cond_in, this};
  const Condition cond(&EvalGuarded, &g);
  PS_REAL(bool (*)(Mutex*, C, Duration),
          "_ZN4absl7debian35Mutex25ReaderLockWhenWithTimeoutERKNS0_"
          "9ConditionENS0_8DurationE");
  const bool r = real(this, cond, timeout);
  Acquire(this);
  return r;
}
bool Mutex::ReaderLockWhenWithDeadline(C cond_in, Time deadline) {
  Guarded g{&cond_in, this};
  const Condition cond(&EvalGuarded, &g);
  PS_REAL(bool (*)(Mutex*, C, Time),
          "_ZN4absl7debian35Mutex26ReaderLockWhenWithDeadlineERKNS0_"
          "9ConditionENS0_4TimeE");
  const bool r = real(this, cond, deadline);
  Acquire(this);
  return r;
}
// Await* give the mutex up while waiting and hold it again on return.
void Mutex::Await(C cond_in) {
  Guarded g{&cond_in, this};
  const Condition cond(&EvalGuarded, &g);
  PS_REAL(void (*)(Mutex*, C),
          "_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  Release(this);
  real(this, cond);
  Acquire(this);
}
bool Mutex::AwaitWithTimeout(C cond_in, Duration timeout) {
  Guarded g{&cond_in, this};
  const Condition cond(&EvalGuarded, &g);
  PS_REAL(bool (*)(Mutex*, C, Duration),
          "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_"
          "8DurationE");
  Release(this);
  const bool r = real(this, cond, timeout);
  Acquire(this);
  return r;
}
bool Mutex::AwaitWithDeadline(C cond_in, Time deadline) {
  Guarded g{&cond_in, this};
  const Condition cond(&EvalGuarded, &g);
  PS_REAL(bool (*)(Mutex*, C, Time),
          "_ZN4absl7debian35Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_"
          "4TimeE");
  Release(this);
  const bool r = real(this, cond, deadline);
  Acquire(this);
  return r;
}

void CondVar::Wait(Mutex* mu) {
  PS_REAL(void (*)(CondVar*, Mutex*),
          "_ZN4absl7debian37CondVar4WaitEPNS0_5MutexE");
  Release(mu);
  real(this, mu);
  Acquire(mu);
}
bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  PS_REAL(
      bool (*)(CondVar*, Mutex*, Duration),
      "_ZN4absl7debian37CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Release(mu);
  const bool r = real(this, mu, timeout);
  Acquire(mu);
  return r;
}
bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  PS_REAL(bool (*)(CondVar*, Mutex*, Time),
          "_ZN4absl7debian37CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Release(mu);
  const bool r = real(this, mu, deadline);
  Acquire(mu);
  return r;
}

void Notification::Notify() {
  PS_REAL(void (*)(Notification*), "_ZN4absl7debian312Notification6NotifyEv");
  Release(this);
  real(this);
}
void Notification::WaitForNotification() const {
  PS_REAL(void (*)(const Notification*),
          "_ZNK4absl7debian312Notification19WaitForNotificationEv");
  real(this);
  Acquire(this);
}
bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  PS_REAL(bool (*)(const Notification*, Duration),
          "_ZNK4absl7debian312Notification30WaitForNotificationWithTimeoutENS0_"
          "8DurationE");
  const bool r = real(this, timeout);
  if (r) Acquire(this);
  return r;
}
bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  PS_REAL(
      bool (*)(const Notification*, Time),
      "_ZNK4absl7debian312Notification31WaitForNotificationWithDeadlineENS0_"
      "4TimeE");
  const bool r = real(this, deadline);
  if (r) Acquire(this);
  return r;
}

}  // namespace absl
