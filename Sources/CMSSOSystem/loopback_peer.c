// Who is at the other end of a loopback TCP connection: see cmsso_loopback_peer_uid in
// cmsso_system.h. Swift cannot build the netlink request (nested packed kernel structs, macros).
#include "cmsso_system.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/// One exact lookup (the kernel finds the socket by its four-tuple; no dump of the table).
static int by_sock_diag(uint32_t peer_address, uint16_t peer_port, uint32_t local_address, uint16_t local_port,
                        uint32_t *uid) {
    int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0) return -errno;
    struct timeval timeout = {.tv_sec = 1};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    struct {
        struct nlmsghdr header;
        struct inet_diag_req_v2 request;
    } message;
    memset(&message, 0, sizeof message);
    message.header.nlmsg_len = sizeof message;
    message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    message.header.nlmsg_flags = NLM_F_REQUEST;
    message.request.sdiag_family = AF_INET;
    message.request.sdiag_protocol = IPPROTO_TCP;
    message.request.idiag_states = ~0u;
    // The client's socket: bound at the peer's address and port, connected to ours.
    message.request.id.idiag_src[0] = htonl(peer_address);
    message.request.id.idiag_sport = htons(peer_port);
    message.request.id.idiag_dst[0] = htonl(local_address);
    message.request.id.idiag_dport = htons(local_port);
    message.request.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
    message.request.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
    if (sendto(fd, &message, sizeof message, 0, (struct sockaddr *)&kernel, sizeof kernel) < 0) {
        int error = errno;
        close(fd);
        return -error;
    }
    long answer[1024]; // aligned for nlmsghdr
    ssize_t length = recv(fd, answer, sizeof answer, 0);
    int error = length < 0 ? errno : 0;
    close(fd);
    if (length < 0) return -error;
    for (struct nlmsghdr *header = (struct nlmsghdr *)answer; NLMSG_OK(header, (size_t)length);
         header = NLMSG_NEXT(header, length)) {
        if (header->nlmsg_type == NLMSG_ERROR) {
            const struct nlmsgerr *failure = NLMSG_DATA(header);
            return failure->error < 0 ? failure->error : -EPROTO;
        }
        if (header->nlmsg_type != SOCK_DIAG_BY_FAMILY || header->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
            continue;
        const struct inet_diag_msg *found = NLMSG_DATA(header);
        // The exact lookup may fall back to a listener on the peer's port; and a closing socket
        // (TIME_WAIT, or an orphan in FIN_WAIT2 kept as one) reports uid 0: neither is the peer.
        if (found->id.idiag_sport != htons(peer_port) || found->id.idiag_dport != htons(local_port) ||
            found->idiag_state == TCP_LISTEN || found->idiag_state == TCP_TIME_WAIT)
            return -ENOENT;
        *uid = found->idiag_uid;
        return 0;
    }
    return -EPROTO;
}

/// The same from /proc/net/tcp (a kernel without sock_diag for TCP): a linear read of the table.
static int by_proc(uint32_t peer_address, uint16_t peer_port, uint32_t local_address, uint16_t local_port, uint32_t *uid) {
    FILE *table = fopen("/proc/net/tcp", "re");
    if (!table) return -errno;
    char line[512];
    int result = -ENOENT;
    if (!fgets(line, sizeof line, table)) { // the heading
        fclose(table);
        return -EIO;
    }
    while (fgets(line, sizeof line, table)) {
        unsigned int local_hex, local_port_found, remote_hex, remote_port_found, state;
        unsigned long owner;
        // sl local_address rem_address st tx:rx tr:when retrnsmt uid
        if (sscanf(line, " %*d: %8X:%4X %8X:%4X %2X %*X:%*X %*X:%*X %*X %lu", &local_hex, &local_port_found,
                   &remote_hex, &remote_port_found, &state, &owner) != 6)
            continue;
        // Addresses are printed as the raw network-order word.
        if (local_hex == htonl(peer_address) && local_port_found == peer_port && remote_hex == htonl(local_address) &&
            remote_port_found == local_port && state != TCP_LISTEN && state != TCP_TIME_WAIT) {
            *uid = (uint32_t)owner;
            result = 0;
            break;
        }
    }
    fclose(table);
    return result;
}

int cmsso_loopback_peer_uid(uint32_t peer_address, uint16_t peer_port, uint32_t local_address, uint16_t local_port,
                            uint32_t *uid) {
    int found = by_sock_diag(peer_address, peer_port, local_address, local_port, uid);
    if (found == 0 || found == -ENOENT) return found;
    return by_proc(peer_address, peer_port, local_address, local_port, uid);
}
