/*
 * hash64.c - the checksum of .dsr1 files: XXH64 (xxHash's 64-bit variant,
 * a public, fixed algorithm) written from its specification, seeded with
 * DSR1_HASH_SEED. Chosen because it runs at memory speed (four independent
 * multiply lanes), and because external tools implement it, so a .dsr1 file
 * can be checked without dsr1. dsr1(5) spells the algorithm out.
 *
 * Owns: the streaming state and the one-shot helper. Does not own: what is
 * hashed (dsr1file.c decides). Invariant: the result depends only on the
 * byte sequence and the seed, never on how update() calls split it.
 */
#include <string.h>

#include "dsr1file.h"

#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull
#define P5 0x27D4EB2F165667C5ull

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

/* Little-endian loads regardless of host order (the format is LE). */
static inline uint64_t rd64(const uint8_t *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 |
           (uint64_t)p[3] << 24 | (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 |
           (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}
static inline uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t round64(uint64_t acc, uint64_t in)
{
    acc += in * P2;
    acc = rotl(acc, 31);
    return acc * P1;
}

static inline uint64_t merge(uint64_t h, uint64_t v)
{
    h ^= round64(0, v);
    return h * P1 + P4;
}

/* One 32-byte stripe: each lane takes 8 bytes. */
static inline void stripe(uint64_t v[4], const uint8_t *p)
{
    v[0] = round64(v[0], rd64(p));
    v[1] = round64(v[1], rd64(p + 8));
    v[2] = round64(v[2], rd64(p + 16));
    v[3] = round64(v[3], rd64(p + 24));
}

void dsr1_hash64_init(dsr1_hash64_state *s, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    s->seed = seed;
    s->v[0] = seed + P1 + P2;
    s->v[1] = seed + P2;
    s->v[2] = seed;
    s->v[3] = seed - P1;
}

void dsr1_hash64_update(dsr1_hash64_state *s, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    s->total += n;
    if (s->nbuf) { /* complete a stripe left over from the previous call */
        size_t take = 32 - s->nbuf < n ? 32 - s->nbuf : n;
        memcpy(s->buf + s->nbuf, p, take);
        s->nbuf += (uint32_t)take;
        p += take;
        n -= take;
        if (s->nbuf < 32) return;
        stripe(s->v, s->buf);
        s->nbuf = 0;
    }
    uint64_t v[4] = {s->v[0], s->v[1], s->v[2], s->v[3]};
    for (; n >= 32; p += 32, n -= 32) stripe(v, p);
    memcpy(s->v, v, sizeof v);
    memcpy(s->buf, p, n);
    s->nbuf = (uint32_t)n;
}

uint64_t dsr1_hash64_final(const dsr1_hash64_state *s)
{
    uint64_t h;
    if (s->total >= 32) {
        const uint64_t *v = s->v;
        h = rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18);
        for (int i = 0; i < 4; i++) h = merge(h, v[i]);
    } else {
        h = s->seed + P5;
    }
    h += s->total;
    const uint8_t *p = s->buf;
    size_t n = s->nbuf;
    for (; n >= 8; p += 8, n -= 8) h = rotl(h ^ round64(0, rd64(p)), 27) * P1 + P4;
    if (n >= 4) {
        h = rotl(h ^ (uint64_t)rd32(p) * P1, 23) * P2 + P3;
        p += 4;
        n -= 4;
    }
    for (; n > 0; p++, n--) h = rotl(h ^ (uint64_t)*p * P5, 11) * P1;
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    return h;
}

uint64_t dsr1_hash64(const void *buf, size_t n)
{
    dsr1_hash64_state s;
    dsr1_hash64_init(&s, DSR1_HASH_SEED);
    dsr1_hash64_update(&s, buf, n);
    return dsr1_hash64_final(&s);
}
