#pragma once
// The one error type of egress: a code saying what kind of failure it is, and the message that
// names it. Messages are what deskboxd answers, records and logs, word for word (a policy's
// errors name the field: "egress.allow[2]: ..."): clients and tests match on them.
#include <string>

namespace deskbox::egress {

enum class ErrorCode {
  kBadPolicy,  // a policy, rule, port list or CIDR that does not parse (ParsePolicy, ParseRule,
               // ParseCidr)
  kMalformed,  // a DNS message that breaks the format or is not the message expected: a response
               // where a query belongs, a bad name or record, a mismatched id or question
  kTruncated,  // a DNS message that ends inside its header, a name, the question or a record
  kRefused,    // the upstream resolver refused: it answered REFUSED, or its port is closed
  kUpstream,   // no upstream resolver is configured, or one answered another error rcode
  kIo,         // a socket operation failed: no uplink socket, sending, receiving, the original
               // destination of a guest connection
  kTimeout,    // the upstream resolver did not take or answer the query in time
  kStopping,   // the Egress is being destroyed (deskboxd is stopping)
};

// The code's name ("bad_policy"), for logs and test output.
const char* ToString(ErrorCode code);

struct Error {
  ErrorCode code;
  std::string message;
};

}  // namespace deskbox::egress
