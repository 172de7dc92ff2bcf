// Why this shim exists: the freedesktop Notifications calls take GVariants built from varargs
// format strings (g_variant_new), which Swift cannot call; and a D-Bus signal subscription needs
// a GMainLoop on a thread of its own. Each function is a few GDBus calls; nothing here holds state.
#ifndef MSSO_DESKTOP_BUS_SHIM_H
#define MSSO_DESKTOP_BUS_SHIM_H

#include <gio/gio.h>

#define MSSO_NOTIFY_NAME "org.freedesktop.Notifications"
#define MSSO_NOTIFY_PATH "/org/freedesktop/Notifications"

/// A connection of the notifier's own to the session bus, or NULL when there is none or it does
/// not answer before `cancellable` is cancelled. Not GLib's shared one (`g_bus_get_sync`), which
/// libsecret uses: two threads making the shared connection at once, one of them giving up, left
/// the other with a freed object (GLib-GObject-CRITICAL under a hung bus), and one connecting
/// without a bound held the other's bounded keyring call on the connection's lock.
static inline GDBusConnection *msso_bus_session(GCancellable *cancellable) {
    gchar *address = g_dbus_address_get_for_bus_sync(G_BUS_TYPE_SESSION, cancellable, NULL);
    if (!address) return NULL;
    GDBusConnection *bus = g_dbus_connection_new_for_address_sync(
        address, G_DBUS_CONNECTION_FLAGS_AUTHENTICATION_CLIENT | G_DBUS_CONNECTION_FLAGS_MESSAGE_BUS_CONNECTION,
        NULL, cancellable, NULL);
    g_free(address);
    /* As GLib's shared connection does: the session's bus gone, the session is over (SIGTERM). */
    if (bus) g_dbus_connection_set_exit_on_close(bus, TRUE);
    return bus;
}

/// The uid the kernel says runs the bus daemon at the other end of `bus`, or -1: a session bus
/// address may name another user's bus, whose notification server would then answer `confirm`.
static inline long msso_bus_daemon_uid(GDBusConnection *bus) {
    GIOStream *stream = g_dbus_connection_get_stream(bus);
    if (!G_IS_SOCKET_CONNECTION(stream)) return -1;
    GCredentials *peer = g_socket_get_credentials(g_socket_connection_get_socket(G_SOCKET_CONNECTION(stream)), NULL);
    if (!peer) return -1;
    long uid = (long)g_credentials_get_unix_user(peer, NULL);
    g_object_unref(peer);
    return uid;
}

/// Shows (or, with replaces != 0, replaces) a notification; returns its id, 0 when no server
/// answered within timeout_ms. `actions` is a NULL-terminated list of key, label pairs.
static inline guint32 msso_notify(GDBusConnection *bus, guint32 replaces, const char *summary, const char *body,
                                  const char *const *actions, gint32 expire_ms, int timeout_ms) {
    GVariantBuilder hints;
    g_variant_builder_init(&hints, G_VARIANT_TYPE("a{sv}"));
    g_variant_builder_add(&hints, "{sv}", "urgency", g_variant_new_byte(1));
    g_variant_builder_add(&hints, "{sv}", "desktop-entry", g_variant_new_string("msso"));
    GVariant *result = g_dbus_connection_call_sync(
        bus, MSSO_NOTIFY_NAME, MSSO_NOTIFY_PATH, MSSO_NOTIFY_NAME, "Notify",
        g_variant_new("(susss^as@a{sv}i)", "msso", replaces, "dialog-password", summary, body, actions,
                      g_variant_builder_end(&hints), expire_ms),
        G_VARIANT_TYPE("(u)"), G_DBUS_CALL_FLAGS_NONE, timeout_ms, NULL, NULL);
    if (!result) return 0;
    guint32 id = 0;
    g_variant_get(result, "(u)", &id);
    g_variant_unref(result);
    return id;
}

/// Closes a notification; errors (it is gone already, no server) are ignored.
static inline void msso_notify_close(GDBusConnection *bus, guint32 id, int timeout_ms) {
    GVariant *result = g_dbus_connection_call_sync(bus, MSSO_NOTIFY_NAME, MSSO_NOTIFY_PATH, MSSO_NOTIFY_NAME,
                                                   "CloseNotification", g_variant_new("(u)", id), NULL,
                                                   G_DBUS_CALL_FLAGS_NONE, timeout_ms, NULL, NULL);
    if (result) g_variant_unref(result);
}

typedef void (*msso_action_callback)(guint32 id, const char *action, void *context);

typedef struct {
    msso_action_callback callback;
    void *context;
} msso_action_listener;

static inline void msso_on_signal(GDBusConnection *bus, const gchar *sender, const gchar *path, const gchar *interface,
                                  const gchar *member, GVariant *parameters, gpointer data) {
    (void)bus; (void)sender; (void)path; (void)interface; (void)member;
    if (!g_variant_is_of_type(parameters, G_VARIANT_TYPE("(us)"))) return;
    guint32 id = 0;
    const gchar *action = NULL;
    g_variant_get(parameters, "(u&s)", &id, &action);
    msso_action_listener *listener = data;
    listener->callback(id, action, listener->context);
}

/* NotificationClosed (id, reason): handed on as the action "" (no action has an empty key). */
static inline void msso_on_closed(GDBusConnection *bus, const gchar *sender, const gchar *path, const gchar *interface,
                                  const gchar *member, GVariant *parameters, gpointer data) {
    (void)bus; (void)sender; (void)path; (void)interface; (void)member;
    if (!g_variant_is_of_type(parameters, G_VARIANT_TYPE("(uu)"))) return;
    guint32 id = 0, reason = 0;
    g_variant_get(parameters, "(uu)", &id, &reason);
    msso_action_listener *listener = data;
    listener->callback(id, "", listener->context);
}

/// Calls `callback` for every ActionInvoked the notification server sends, and with the action ""
/// for every NotificationClosed (only its current owner's: GDBus tracks the well-known name), on
/// the calling thread, forever: run it on a thread it may keep (mssod: a pool thread, for the notifier's life).
static inline void msso_listen_for_actions(GDBusConnection *bus, msso_action_callback callback, void *context) {
    GMainContext *main_context = g_main_context_new();
    g_main_context_push_thread_default(main_context);
    msso_action_listener *listener = g_new0(msso_action_listener, 1);
    listener->callback = callback;
    listener->context = context;
    g_dbus_connection_signal_subscribe(bus, MSSO_NOTIFY_NAME, MSSO_NOTIFY_NAME, "ActionInvoked", MSSO_NOTIFY_PATH,
                                       NULL, G_DBUS_SIGNAL_FLAGS_NONE, msso_on_signal, listener, NULL);
    g_dbus_connection_signal_subscribe(bus, MSSO_NOTIFY_NAME, MSSO_NOTIFY_NAME, "NotificationClosed", MSSO_NOTIFY_PATH,
                                       NULL, G_DBUS_SIGNAL_FLAGS_NONE, msso_on_closed, listener, NULL);
    GMainLoop *loop = g_main_loop_new(main_context, FALSE);
    g_main_loop_run(loop);
}

#endif
