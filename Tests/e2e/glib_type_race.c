/* LD_PRELOAD for mssod: widens a race GLib 2.74 loses when two threads first use D-Bus at once,
 * so that a start that deadlocks there does so every time rather than once in hundreds.
 *
 * The thread that first registers GDBusConnection's type pauses before adding its interfaces (for
 * which GType takes its class-init lock), and the keyring's first connect waits until that pause
 * has begun: it then enters GDBusProxy's class init (holding the lock) and waits for the same
 * registration. Types registered beforehand, on one thread, go through the pause alone. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <glib-object.h>

static atomic_int registering;

static void pause_ms(long ms) {
    struct timespec pause = { ms / 1000, (ms % 1000) * 1000000 };
    nanosleep(&pause, NULL);
}

void g_type_add_interface_static(GType instance, GType interface, const GInterfaceInfo *info) {
    static void (*real)(GType, GType, const GInterfaceInfo *);
    if (!real) real = (void (*)(GType, GType, const GInterfaceInfo *))dlsym(RTLD_NEXT, "g_type_add_interface_static");
    if (strcmp(g_type_name(instance), "GDBusConnection") == 0 && atomic_exchange(&registering, 1) == 0)
        pause_ms(1000);
    real(instance, interface, info);
}

void *secret_service_get_sync(int flags, void *cancellable, void **error) {
    static void *(*real)(int, void *, void **);
    if (!real) real = (void *(*)(int, void *, void **))dlsym(RTLD_NEXT, "secret_service_get_sync");
    for (int waited = 0; !atomic_load(&registering) && waited < 3000; waited++) pause_ms(1);
    return real(flags, cancellable, error);
}
