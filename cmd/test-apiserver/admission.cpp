#include "cmd/test-apiserver/admission.h"

namespace nodeagent::testapiserver {

const char* admissionOperationName(AdmissionOperation operation) {
  switch (operation) {
    case AdmissionOperation::kCreate:
      return "CREATE";
    case AdmissionOperation::kUpdate:
      return "UPDATE";
    case AdmissionOperation::kDelete:
      return "DELETE";
  }
  return "";
}

}  // namespace nodeagent::testapiserver
