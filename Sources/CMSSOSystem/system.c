#include "cmsso_system.h"
#include <sys/prctl.h>

int cmsso_set_not_dumpable(void) {
    return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}
