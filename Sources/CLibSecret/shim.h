// Why this shim exists: libsecret's convenience API is variadic (not callable from Swift), and
// telling a locked keyring from an absent item takes several GObject calls that read better in C.
// Every function takes a GCancellable that the Swift side cancels on a timer: a hung Secret
// Service would otherwise block for 2 x 25 s (the GDBus default).
#ifndef MSSO_LIBSECRET_SHIM_H
#define MSSO_LIBSECRET_SHIM_H

#include <libsecret/secret.h>
#include <string.h>
#include <unistd.h>

typedef enum {
    MSSO_SECRET_OK = 0,
    MSSO_SECRET_ABSENT = 1,
    MSSO_SECRET_LOCKED = 2,
    MSSO_SECRET_UNAVAILABLE = 3,
    MSSO_SECRET_TIMEOUT = 4,
    /// A Secret Service (or a session bus) of another user: never used.
    MSSO_SECRET_FOREIGN = 5,
} msso_secret_result;

// One item per access group and schema. Attributes are readable while the keyring is locked:
// they hold names only, never a token, a key or an expiry time.
static const SecretSchema msso_credential_schema = {
    "org.msso.Credential", SECRET_SCHEMA_NONE,
    { { "group", SECRET_SCHEMA_ATTRIBUTE_STRING }, { "issuer", SECRET_SCHEMA_ATTRIBUTE_STRING }, { NULL, 0 } },
};
// The group's signing key: kept apart from the credential so that it outlives a logout.
static const SecretSchema msso_key_schema = {
    "org.msso.Key", SECRET_SCHEMA_NONE,
    { { "group", SECRET_SCHEMA_ATTRIBUTE_STRING }, { "kind", SECRET_SCHEMA_ATTRIBUTE_STRING }, { NULL, 0 } },
};

static inline const SecretSchema *msso_credential_schema_ref(void) { return &msso_credential_schema; }
static inline const SecretSchema *msso_key_schema_ref(void) { return &msso_key_schema; }

/// Registers, on the calling thread, the GLib types that the keyring's calls and the notifier's
/// connect (each on a pool thread, as mssod starts) would otherwise register at once.
/// GLib 2.74 deadlocks there: one thread, in GDBusProxy's class init (holding GType's class-init
/// lock), waits for GDBusConnection's registration, which the other thread is doing and which
/// needs that lock to add GDBusConnection's interfaces. Seen as a start that never chose a store.
static inline void msso_glib_types_ready(void) {
    GError *none = g_error_new_literal(G_IO_ERROR, G_IO_ERROR_FAILED, "");
    g_free(g_dbus_error_get_remote_error(none)); /* GDBus's own one-time set-up, and its types */
    g_error_free(none);
    GType types[] = { G_TYPE_DBUS_CONNECTION, G_TYPE_DBUS_MESSAGE, SECRET_TYPE_SERVICE, SECRET_TYPE_COLLECTION, SECRET_TYPE_ITEM };
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) g_type_class_unref(g_type_class_ref(types[i]));
}

static inline msso_secret_result msso_secret_fail(GError *error, char **message) {
    msso_secret_result result = g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED)
        ? MSSO_SECRET_TIMEOUT : MSSO_SECRET_UNAVAILABLE;
    *message = g_strdup(error->message);
    g_error_free(error);
    return result;
}

// The items of one group; *out is a list the caller frees with g_list_free_full(…, g_object_unref).
static inline msso_secret_result msso_secret_search(SecretService *service, const SecretSchema *schema, const char *group, gboolean load,
                                                    GList **out, GCancellable *cancellable, char **message) {
    GError *error = NULL;
    GHashTable *attributes = g_hash_table_new(g_str_hash, g_str_equal);
    g_hash_table_insert(attributes, "group", (gpointer)group);
    // No SECRET_SEARCH_UNLOCK: a locked keyring must be reported, never prompted for here.
    SecretSearchFlags flags = SECRET_SEARCH_ALL | (load ? SECRET_SEARCH_LOAD_SECRETS : 0);
    *out = secret_service_search_sync(service, schema, attributes, flags, cancellable, &error);
    g_hash_table_unref(attributes);
    return error ? msso_secret_fail(error, message) : MSSO_SECRET_OK;
}

/// Whether `bus` and the owner of `name` on it are this user's (or root's): a session bus address
/// can name a bus another user runs (an abstract socket, a stale /tmp path), whose "Secret
/// Service" would then read every token stored and hand back sessions of its choosing. The bus
/// daemon is judged by the kernel (SO_PEERCRED of our connection); once it is ours, its word on
/// who owns `name` is. Otherwise FOREIGN, with why.
static inline msso_secret_result msso_bus_trusted(GDBusConnection *bus, const char *name, GCancellable *cancellable, char **message) {
    uid_t me = getuid();
    GIOStream *stream = g_dbus_connection_get_stream(bus);
    GCredentials *peer = G_IS_SOCKET_CONNECTION(stream)
        ? g_socket_get_credentials(g_socket_connection_get_socket(G_SOCKET_CONNECTION(stream)), NULL) : NULL;
    uid_t daemon = peer ? g_credentials_get_unix_user(peer, NULL) : (uid_t)-1;
    if (peer) g_object_unref(peer);
    if (daemon != me && daemon != 0) {
        *message = g_strdup_printf("the session bus is run by uid %d, not by you (uid %d): its Secret Service is not yours",
                                   (int)daemon, (int)me);
        return MSSO_SECRET_FOREIGN;
    }
    GError *error = NULL;
    GVariant *owner = g_dbus_connection_call_sync(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                                  "GetConnectionUnixUser", g_variant_new("(s)", name), G_VARIANT_TYPE("(u)"),
                                                  G_DBUS_CALL_FLAGS_NONE, -1, cancellable, &error);
    if (!owner) return msso_secret_fail(error, message);
    guint32 uid = 0;
    g_variant_get(owner, "(u)", &uid);
    g_variant_unref(owner);
    if (uid != me && uid != 0) {
        *message = g_strdup_printf("%s on the session bus belongs to uid %u, not to you (uid %d)", name, uid, (int)me);
        return MSSO_SECRET_FOREIGN;
    }
    return MSSO_SECRET_OK;
}

/// Drops libsecret's service, so that the next call makes it again: the Secret Service may be
/// another process now (under a new unique name), or the session bus itself (its connection
/// closed). GLib keeps its shared bus connection, closed, while anything holds it: libsecret's
/// service, and the "closed" signal it has yet to send on the main context the connection was made
/// in (the default one: the keyring's calls run on a thread that pushes none), dispatched here.
static inline void msso_secret_reset(void) {
    secret_service_disconnect();
    GMainContext *context = g_main_context_default();
    if (g_main_context_acquire(context)) {
        while (g_main_context_iteration(context, FALSE)) {}
        g_main_context_release(context);
    }
}

static inline SecretService *msso_secret_service(GCancellable *cancellable, msso_secret_result *result, char **message) {
    GError *error = NULL;
    SecretService *service = secret_service_get_sync(SECRET_SERVICE_NONE, cancellable, &error);
    if (!service) {
        *result = error ? msso_secret_fail(error, message) : MSSO_SECRET_UNAVAILABLE;
        return NULL;
    }
    // libsecret's proxy names the service by its well-known name: whoever owns it now answers.
    msso_secret_result trusted = msso_bus_trusted(g_dbus_proxy_get_connection(G_DBUS_PROXY(service)),
                                                  "org.freedesktop.secrets", cancellable, message);
    if (trusted != MSSO_SECRET_OK) {
        g_object_unref(service);
        *result = trusted;
        return NULL;
    }
    return service;
}

/// Whether the default collection, where msso stores, is there and unlocked: OK, LOCKED, or
/// UNAVAILABLE with a message. Reads no item and never prompts.
static inline msso_secret_result msso_secret_default_state(SecretService *service, GCancellable *cancellable, char **message) {
    GError *error = NULL;
    SecretCollection *collection = secret_collection_for_alias_sync(service, SECRET_COLLECTION_DEFAULT,
                                                                    SECRET_COLLECTION_NONE, cancellable, &error);
    if (!collection) {
        if (error) return msso_secret_fail(error, message);
        *message = g_strdup("the Secret Service has no default keyring");
        return MSSO_SECRET_UNAVAILABLE;
    }
    msso_secret_result result = secret_collection_get_locked(collection) ? MSSO_SECRET_LOCKED : MSSO_SECRET_OK;
    g_object_unref(collection);
    return result;
}

/// No item found is proof of none only in an unlocked keyring: gnome-keyring started again (by
/// D-Bus activation, after it died) shows none of a locked keyring's items until it is unlocked.
/// So ABSENT, or LOCKED (or why not) when the default keyring cannot vouch for it.
static inline msso_secret_result msso_secret_absent(SecretService *service, GCancellable *cancellable, char **message) {
    msso_secret_result state = msso_secret_default_state(service, cancellable, message);
    return state == MSSO_SECRET_OK ? MSSO_SECRET_ABSENT : state;
}

/// Reads the group's secret into *secret (free with msso_secret_free). Locked items are reported
/// as LOCKED: libsecret's lookup would return NULL for them, indistinguishable from "absent".
static inline msso_secret_result msso_secret_lookup(const SecretSchema *schema, const char *group, char **secret,
                                                    GCancellable *cancellable, char **message) {
    msso_secret_result result = MSSO_SECRET_OK;
    SecretService *service = msso_secret_service(cancellable, &result, message);
    if (!service) return result;
    GList *items = NULL;
    result = msso_secret_search(service, schema, group, TRUE, &items, cancellable, message);
    if (result == MSSO_SECRET_OK && !items) result = msso_secret_absent(service, cancellable, message);
    g_object_unref(service);
    if (result != MSSO_SECRET_OK) return result;
    result = MSSO_SECRET_ABSENT;
    for (GList *l = items; l; l = l->next) {
        if (secret_item_get_locked(l->data)) { result = MSSO_SECRET_LOCKED; break; }
        SecretValue *value = secret_item_get_secret(l->data);
        if (!value) continue;
        *secret = g_strdup(secret_value_get_text(value));
        secret_value_unref(value);
        result = MSSO_SECRET_OK;
        break;
    }
    g_list_free_full(items, g_object_unref);
    return result;
}

/// Stores the group's secret in the default collection, replacing its item; `extra` names the
/// schema's second attribute (`issuer`, `kind`). Refuses (LOCKED) rather than prompting when the
/// collection is locked.
static inline msso_secret_result msso_secret_store(const SecretSchema *schema, const char *group, const char *extra,
                                                   const char *extra_value, const char *label,
                                                   const char *secret, GCancellable *cancellable, char **message) {
    msso_secret_result result = MSSO_SECRET_OK;
    SecretService *service = msso_secret_service(cancellable, &result, message);
    if (!service) return result;
    result = msso_secret_default_state(service, cancellable, message);
    if (result != MSSO_SECRET_OK) { g_object_unref(service); return result; }

    GError *error = NULL;
    GHashTable *attributes = g_hash_table_new(g_str_hash, g_str_equal);
    g_hash_table_insert(attributes, "group", (gpointer)group);
    g_hash_table_insert(attributes, (gpointer)extra, (gpointer)extra_value);
    SecretValue *value = secret_value_new(secret, -1, "application/json");
    gboolean stored = secret_service_store_sync(service, schema, attributes, SECRET_COLLECTION_DEFAULT,
                                                label, value, cancellable, &error);
    secret_value_unref(value);
    g_hash_table_unref(attributes);
    if (!stored) {
        g_object_unref(service);
        return error ? msso_secret_fail(error, message) : MSSO_SECRET_UNAVAILABLE;
    }
    // Same attributes replace the item; one left with an earlier issuer (or key kind) would not
    // be, so remove it now that the new one is safely written.
    GList *items = NULL;
    if (msso_secret_search(service, schema, group, FALSE, &items, cancellable, message) == MSSO_SECRET_OK) {
        for (GList *l = items; l; l = l->next) {
            GHashTable *attrs = secret_item_get_attributes(l->data);
            const char *other = g_hash_table_lookup(attrs, extra);
            if (!other || strcmp(other, extra_value) != 0) secret_item_delete_sync(l->data, cancellable, NULL);
            g_hash_table_unref(attrs);
        }
        g_list_free_full(items, g_object_unref);
    }
    g_object_unref(service);
    return MSSO_SECRET_OK;
}

/// Deletes the group's items. Deletes nothing (LOCKED) when any of them is locked.
static inline msso_secret_result msso_secret_delete(const SecretSchema *schema, const char *group, GCancellable *cancellable, char **message) {
    msso_secret_result result = MSSO_SECRET_OK;
    SecretService *service = msso_secret_service(cancellable, &result, message);
    if (!service) return result;
    GList *items = NULL;
    result = msso_secret_search(service, schema, group, FALSE, &items, cancellable, message);
    // A delete that found nothing in a keyring that cannot vouch for it has not happened.
    if (result == MSSO_SECRET_OK && !items) result = msso_secret_absent(service, cancellable, message);
    g_object_unref(service);
    if (result != MSSO_SECRET_OK) return result;
    result = MSSO_SECRET_OK;
    for (GList *l = items; l; l = l->next)
        if (secret_item_get_locked(l->data)) result = MSSO_SECRET_LOCKED;
    for (GList *l = items; l && result == MSSO_SECRET_OK; l = l->next) {
        GError *error = NULL;
        if (!secret_item_delete_sync(l->data, cancellable, &error))
            result = error ? msso_secret_fail(error, message) : MSSO_SECRET_UNAVAILABLE;
    }
    g_list_free_full(items, g_object_unref);
    return result;
}


/// Whether the default collection, where msso stores, is there and unlocked (`msso doctor`):
/// OK, LOCKED, or UNAVAILABLE with a message. Reads no item and never prompts.
static inline msso_secret_result msso_secret_probe(GCancellable *cancellable, char **message) {
    msso_secret_result result = MSSO_SECRET_OK;
    SecretService *service = msso_secret_service(cancellable, &result, message);
    if (!service) return result;
    result = msso_secret_default_state(service, cancellable, message);
    g_object_unref(service);
    return result;
}

/// Whether the Secret Service holds any of msso's items (a credential or a signing key, of any
/// group), locked or not: OK when it does, ABSENT when not. Reads attributes only, which a locked
/// keyring shows: nothing is unlocked or prompted for.
static inline msso_secret_result msso_secret_holds_any(GCancellable *cancellable, char **message) {
    msso_secret_result result = MSSO_SECRET_OK;
    SecretService *service = msso_secret_service(cancellable, &result, message);
    if (!service) return result;
    result = MSSO_SECRET_ABSENT;
    const SecretSchema *schemas[] = { &msso_credential_schema, &msso_key_schema };
    for (int i = 0; i < 2 && result == MSSO_SECRET_ABSENT; i++) {
        GError *error = NULL;
        GHashTable *none = g_hash_table_new(g_str_hash, g_str_equal);
        GList *items = secret_service_search_sync(service, schemas[i], none, SECRET_SEARCH_ALL, cancellable, &error);
        g_hash_table_unref(none);
        if (error) result = msso_secret_fail(error, message);
        else if (items) result = MSSO_SECRET_OK;
        g_list_free_full(items, g_object_unref);
    }
    g_object_unref(service);
    return result;
}

/// The accounts beside a group's default one that hold an item of `schema`: the `group` attribute
/// of each item that begins with `prefix` (the group's name and U+001F), the rest of it, one per
/// line, in *out (freed with msso_secret_free). Reads attributes only, which a locked keyring shows.
static inline msso_secret_result msso_secret_accounts(const SecretSchema *schema, const char *prefix, char **out,
                                                      GCancellable *cancellable, char **message) {
    msso_secret_result result = MSSO_SECRET_OK;
    SecretService *service = msso_secret_service(cancellable, &result, message);
    if (!service) return result;
    GError *error = NULL;
    GHashTable *none = g_hash_table_new(g_str_hash, g_str_equal);
    GList *items = secret_service_search_sync(service, schema, none, SECRET_SEARCH_ALL, cancellable, &error);
    g_hash_table_unref(none);
    g_object_unref(service);
    if (error) return msso_secret_fail(error, message);
    GString *names = g_string_new(NULL);
    size_t length = strlen(prefix);
    for (GList *l = items; l; l = l->next) {
        GHashTable *attributes = secret_item_get_attributes(l->data);
        const char *group = attributes ? g_hash_table_lookup(attributes, "group") : NULL;
        if (group && strncmp(group, prefix, length) == 0 && !strchr(group + length, '\n')) {
            g_string_append(names, group + length);
            g_string_append_c(names, '\n');
        }
        if (attributes) g_hash_table_unref(attributes);
    }
    g_list_free_full(items, g_object_unref);
    *out = g_string_free(names, FALSE);
    return MSSO_SECRET_OK;
}

/// Wipes and frees a string the shim returned.
static inline void msso_secret_free(char *text) {
    if (!text) return;
    explicit_bzero(text, strlen(text));
    g_free(text);
}

#endif
