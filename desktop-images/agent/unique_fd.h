// Owning file descriptor: the project's own (header-only, so the guest binary links nothing
// more).
#pragma once

#include "common/unique_fd.h"

namespace deskbox::agent {
using deskbox::UniqueFd;
}  // namespace deskbox::agent
