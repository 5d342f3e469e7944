#pragma once
#include "cli/args.h"

namespace deskbox::cli {

// Runs one parsed command against the daemon and returns the process exit status. Writes the
// result to stdout and problems to stderr as "deskbox: …". The credential must be set (or
// absent) and already checked with IsValidCredential.
int RunCommand(const Invocation& invocation);

}  // namespace deskbox::cli
