/* The floor for a token relay: the least a gateway can do between llama-server and a client, in C.
 *
 *   relay_floor LISTEN_PORT UPSTREAM_PORT [API_KEY]
 *
 * One connection at a time, blocking sockets, no parsing beyond what the relay needs: the client's POST body is
 * sent to llama-server's /completion as is, and each streamed `data:` event becomes an Ollama-style NDJSON chunk
 * ({"model", "created_at", "response", "done"}) with the event's JSON-escaped content copied verbatim; the last
 * event becomes {"done": true, "eval_count", "eval_duration"} from its timings. Loopback only. Not part of
 * ollama-py: bench/relay_floor.py uses it to tell what the gateway's Python costs apart from what any relay
 * costs on this machine.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static char in[1 << 20], text[1 << 20];
static char auth[512]; /* "Authorization: Bearer KEY\r\n" when the upstream wants a key */

static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int write_chunk(int fd, const char *line, int len) {
    char head[16];
    int hl = snprintf(head, sizeof head, "%x\r\n", len);
    return write_all(fd, head, hl) || write_all(fd, line, len) || write_all(fd, "\r\n", 2);
}

static int connect_loopback(int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(0x7f000001)};
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0) return -1;
    return s;
}

/* One event (a `data:` payload, NUL-terminated): write its chunk; 1 when it was the last. */
static int relay_event(int client, const char *ev) {
    char line[16384];
    int len;
    if (strstr(ev, "\"stop\":true")) {
        const char *n = strstr(ev, "\"predicted_n\":"), *ms = strstr(ev, "\"predicted_ms\":");
        len = snprintf(line, sizeof line, "{\"done\":true,\"eval_count\":%ld,\"eval_duration\":%.0f}\n",
                       n ? atol(n + 14) : 0L, ms ? atof(ms + 15) * 1e6 : 0.0);
        write_chunk(client, line, len);
        return 1;
    }
    const char *start = strstr(ev, "\"content\":\"");
    if (!start) return 0;
    start += 11;
    const char *end = start;
    while (*end && *end != '"') end += (*end == '\\' && end[1]) ? 2 : 1;
    struct timespec now;
    struct tm tm;
    char stamp[32];
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    len = snprintf(line, sizeof line,
                   "{\"model\":\"floor\",\"created_at\":\"%s.%06ldZ\",\"response\":\"%.*s\",\"done\":false}\n",
                   stamp, now.tv_nsec / 1000, (int)(end - start), start);
    if (len >= (int)sizeof line) return 0;
    return write_chunk(client, line, len) ? 1 : 0;
}

static void serve_one(int client, int upstream_port) {
    size_t have = 0;
    char *body;
    for (;;) { /* the request head and its body */
        ssize_t r = read(client, in + have, sizeof in - have - 1);
        if (r <= 0) return;
        have += (size_t)r;
        in[have] = 0;
        if ((body = strstr(in, "\r\n\r\n"))) {
            const char *cl = strcasestr(in, "content-length:");
            long need = cl ? atol(cl + 15) : 0;
            body += 4;
            if ((long)(in + have - body) >= need) {
                have = (size_t)need;
                break;
            }
        }
    }
    int up = connect_loopback(upstream_port);
    if (up < 0) return;
    char head[1024];
    int hl = snprintf(head, sizeof head, "POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                      "application/json\r\n%sContent-Length: %zu\r\nConnection: close\r\n\r\n", auth, have);
    if (write_all(up, head, hl) || write_all(up, body, have)) goto out;
    int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    const char *ok = "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n";
    size_t raw = 0, tl = 0;
    int in_body = 0, last = 0;
    while (!last) {
        ssize_t r = read(up, in + raw, sizeof in - raw - 1);
        if (r <= 0) break;
        raw += (size_t)r;
        size_t pos = 0;
        if (!in_body) {
            in[raw] = 0;
            char *e = strstr(in, "\r\n\r\n");
            if (!e) continue;
            pos = (size_t)(e + 4 - in);
            in_body = 1;
            if (write_all(client, ok, strlen(ok))) goto out;
        }
        for (;;) { /* complete HTTP chunks -> text */
            char *eol = memmem(in + pos, raw - pos, "\r\n", 2);
            if (!eol) break;
            size_t size = strtoul(in + pos, NULL, 16), data = (size_t)(eol + 2 - in);
            if (size == 0) { last = 1; break; }
            if (data + size + 2 > raw || tl + size >= sizeof text) break;
            memcpy(text + tl, in + data, size);
            tl += size;
            pos = data + size + 2;
        }
        memmove(in, in + pos, raw - pos);
        raw -= pos;
        size_t tp = 0;
        char *sep;
        while ((sep = memmem(text + tp, tl - tp, "\n\n", 2))) { /* complete events */
            char *ev = text + tp;
            *sep = 0;
            tp = (size_t)(sep + 2 - text);
            if (strncmp(ev, "data: ", 6) == 0 && relay_event(client, ev + 6)) last = 2;
        }
        memmove(text, text + tp, tl - tp);
        tl -= tp;
    }
    write_all(client, "0\r\n\r\n", 5);
out:
    close(up);
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s LISTEN_PORT UPSTREAM_PORT [API_KEY]\n", argv[0]);
        return 2;
    }
    if (argc == 4) snprintf(auth, sizeof auth, "Authorization: Bearer %.400s\r\n", argv[3]);
    int port = atoi(argv[1]), upstream = atoi(argv[2]), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(0x7f000001)};
    int s = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 16) != 0) {
        perror("relay_floor: listen");
        return 1;
    }
    for (;;) {
        int c = accept(s, NULL, NULL);
        if (c < 0) continue;
        serve_one(c, upstream);
        close(c);
    }
}
