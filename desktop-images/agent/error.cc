#include "agent/error.h"

#include <cerrno>
#include <cstring>

namespace deskbox::agent {

AgentError ErrnoError(int err, std::string_view context) {
  pb::Error::Code code = pb::Error::INTERNAL;
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      code = pb::Error::NOT_FOUND;
      break;
    case EACCES:
    case EPERM:
    case EROFS:
      code = pb::Error::PERMISSION_DENIED;
      break;
    case EINVAL:
    case EISDIR:
    case ELOOP:
    case ENAMETOOLONG:
      code = pb::Error::INVALID_ARGUMENT;
      break;
    case EFBIG:
    case E2BIG:
      code = pb::Error::TOO_LARGE;
      break;
    case ETIMEDOUT:
      code = pb::Error::TIMEOUT;
      break;
    case ENOSYS:
    case ENOTTY:
    case EOPNOTSUPP:
      code = pb::Error::UNSUPPORTED;
      break;
    default:
      break;
  }
  std::string message(context);
  message += ": ";
  message += std::strerror(err);
  return AgentError{code, std::move(message)};
}

}  // namespace deskbox::agent
