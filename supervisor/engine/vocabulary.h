// The words the engine and the worker both use, defined once: what came of
// signalling one process of a worker, and which generation of a slot a
// process belongs to. worker/ returns them, engine/ takes them as events.
#pragma once

#include "policies/base/enums.h"

namespace recycler::engine {

// What came of signalling one process of a worker (a pre-fork server's child).
enum class Signalled {
  Sent,
  NotMember,  // gone, or no longer in the worker's cgroup (the pid was reused)
  Gone,       // exited between the look and the signal
};
inline constexpr EnumName<Signalled> kSignalledNames[] = {
    {Signalled::Sent, "sent"}, {Signalled::NotMember, "not-member"}, {Signalled::Gone, "gone"}};
inline const char* to_string(Signalled s) {
  return enum_name(kSignalledNames, s);
}

// Which generation of a slot a process belongs to: the running one, the next
// one of a surge under way, or the one a surge replaced while it stops.
// Their requests count in different runs.
enum class Generation { Current, Next, Retiring };
inline constexpr EnumName<Generation> kGenerationNames[] = {{Generation::Current, "current"},
                                                            {Generation::Next, "next"},
                                                            {Generation::Retiring, "retiring"}};
inline const char* to_string(Generation g) {
  return enum_name(kGenerationNames, g);
}

}  // namespace recycler::engine
