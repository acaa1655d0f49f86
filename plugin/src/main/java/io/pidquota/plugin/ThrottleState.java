package io.pidquota.plugin;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The throttle set, as pidquota's compacted state topic gives it: pure, and clock-free (every
 * time is a parameter, in wall-clock ms).
 *
 * <p>Records (keys and values are UTF-8 text; a null value is a tombstone):
 * <ul>
 *   <li>{@code t:User:crash} = {@code 1767225660000}: refuse InitProducerId to {@code User:crash}
 *       until that time; its tombstone ends it at once.</li>
 *   <li>{@code c:4:loopUser:crash} = {@code 1767225660000}: the same, narrowed to the requests of
 *       client id {@code loop} (its length in UTF-16 code units, no leading zero, a colon, the
 *       id, then the principal: any client id reads unambiguously); the user's other client ids
 *       are served.</li>
 *   <li>{@code h} = {@code AT_MS MAX_AGE_MS}: pidquota's heartbeat. The set is obeyed only while
 *       {@code now - AT_MS <= MAX_AGE_MS} and {@code AT_MS - now <= SKEW_MS}: a pidquota that is
 *       gone (or a state topic that stopped, or a heartbeat dated ahead of this broker's clock by
 *       more than a skew) refuses nothing (fail open).</li>
 *   <li>{@code switch} = {@code off} or {@code on} (any case, spaces around; also
 *       {@code false}/{@code true}, {@code 0}/{@code 1}): the kill switch, cluster-wide.</li>
 * </ul>
 * Anything else (another key, a value that is not a number, a wildcard or empty principal, bytes
 * that are not UTF-8, a key over {@code MAX_KEY_BYTES}) is skipped and counted, never applied.
 *
 * <p>Bounded whatever the topic holds: a throttle that has ended is dropped (on arrival and by
 * {@link #prune}); an end further than {@code MAX_HOLD_MS} ahead is cut to it; at most
 * {@code MAX_ENTRIES} entries of at most {@code MAX_CHARS} characters of keys in all. A new entry
 * past either bound is not stored, and the whole set refuses nothing ({@link #overflowing}) until
 * it holds half the entries again: a set that large is crafted or broken, and failing open is
 * the safe way to be wrong. So the map stays under about {@code MAX_CHARS * 2 + MAX_ENTRIES *
 * 120} bytes (about 6 MiB).
 *
 * <p>Worked example: after {@code h = "1000 30000"} and {@code t:User:crash = "61000"},
 * {@code refuses("User:crash", 20000)} is true; at 40000 it is false (the heartbeat is 39 s old,
 * over 30 s: fail open) until a newer heartbeat comes; at 70000, with a fresh heartbeat, false
 * (the throttle ended at 61000). A heartbeat {@code h = "900000 30000"} read at 20000 is 880 s
 * ahead of the broker's clock (over {@code SKEW_MS}): not obeyed, however long it would last.
 */
public final class ThrottleState {
    public static final String THROTTLE = "t:";
    public static final String CLIENT = "c:";
    static final int MAX_CLIENT = 4096;
    public static final String HEARTBEAT = "h";
    public static final String SWITCH = "switch";
    static final long MAX_MS = 1L << 53;
    static final int MAX_PRINCIPAL = 4096;
    /** How far ahead of this broker's clock a heartbeat may be dated and still be obeyed. */
    public static final long SKEW_MS = 30_000;
    /** The longest a throttle lasts from when it is read: pidquota writes a day ahead. */
    public static final long MAX_HOLD_MS = 24L * 3600 * 1000 + SKEW_MS;
    /** The most entries (throttles of principals or of their client ids) held. */
    public static final int MAX_ENTRIES = 10_000;
    /** The most characters of keys held, in all. */
    public static final long MAX_CHARS = 2L << 20;
    /** A key longer than this (in bytes) is skipped before it is decoded. */
    static final int MAX_KEY_BYTES = 4 * (MAX_PRINCIPAL + MAX_CLIENT + 16);

    /** A principal (a String), or a principal's client id (a {@link Narrow}) -> its throttle's end. */
    private final ConcurrentHashMap<Object, Long> until = new ConcurrentHashMap<>();
    private final AtomicLong chars = new AtomicLong();
    private volatile boolean overflowing;
    private volatile long heartbeatAtMs = -1;
    private volatile long maxAgeMs = 0;
    private volatile boolean enabled = true;

    /** One client id of one principal. */
    static final class Narrow {
        final String principal;
        final String clientId;

        Narrow(String principal, String clientId) {
            this.principal = principal;
            this.clientId = clientId;
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof Narrow && ((Narrow) o).principal.equals(principal)
                && ((Narrow) o).clientId.equals(clientId);
        }

        @Override
        public int hashCode() {
            return Objects.hash(principal, clientId);
        }
    }

    /** Applies one record read at {@code nowMs}; returns null, or why it was skipped. */
    public String apply(byte[] key, byte[] value, long nowMs) {
        if (key != null && key.length > MAX_KEY_BYTES) {
            return "a key of " + key.length + " bytes (at most " + MAX_KEY_BYTES + ")";
        }
        String k = text(key);
        if (k == null) {
            return "a key that is not UTF-8 text";
        }
        String v = value == null ? null : text(value);
        if (value != null && v == null) {
            return "the value of " + shown(k) + " is not UTF-8 text";
        }
        if (k.startsWith(THROTTLE)) {
            return throttle(k.substring(THROTTLE.length()), null, v, nowMs);
        }
        if (k.startsWith(CLIENT)) {
            return client(k.substring(CLIENT.length()), v, nowMs);
        }
        if (k.equals(HEARTBEAT)) {
            return heartbeat(v);
        }
        if (k.equals(SWITCH)) {
            return flip(v);
        }
        return "an unknown key " + shown(k);
    }

    private String flip(String v) {
        String word = v == null ? "on" : v.trim().toLowerCase(Locale.ROOT);
        if (word.equals("off") || word.equals("false") || word.equals("0")) {
            enabled = false;
            return null;
        }
        if (word.equals("on") || word.equals("true") || word.equals("1")) {
            enabled = true;
            return null;
        }
        return "switch must be on or off, not " + shown(v);
    }

    /** {@code N:CLIENTPRINCIPAL}: N the client id's length in chars. */
    private String client(String rest, String v, long nowMs) {
        int colon = rest.indexOf(':');
        // no leading zero: one throttle has one key, whose tombstone ends it
        long n = colon > 0 && colon <= 4 && rest.charAt(0) != '0' ? number(rest.substring(0, colon)) : -1;
        if (n < 1 || n > MAX_CLIENT || colon + 1 + n > rest.length()) {
            return "a client throttle's key must be c:LENGTH:CLIENT_IDPRINCIPAL, not " + shown(CLIENT + rest);
        }
        String clientId = rest.substring(colon + 1, colon + 1 + (int) n);
        return throttle(rest.substring(colon + 1 + (int) n), clientId, v, nowMs);
    }

    private String throttle(String principal, String clientId, String v, long nowMs) {
        String why = principalProblem(principal);
        if (why != null) {
            return why;
        }
        Object key = clientId == null ? principal : new Narrow(principal, clientId);
        long size = principal.length() + (clientId == null ? 0 : clientId.length());
        if (v == null) {
            remove(key, size);
            return null;
        }
        long ms = number(v.trim());
        if (ms < 0) {
            return "the end of " + shown(principal) + "'s throttle is not a time in ms: " + shown(v);
        }
        if (ms <= nowMs) {  // ended: as its tombstone
            remove(key, size);
            return null;
        }
        long end = Math.min(ms, nowMs + MAX_HOLD_MS);
        if (until.replace(key, end) != null) {
            return null;
        }
        if (until.size() >= MAX_ENTRIES || chars.get() + size > MAX_CHARS) {
            overflowing = true;
            return "the set is full (" + until.size() + " entries, " + chars.get() + " characters): "
                + shown(principal) + " not held, and nothing refused until it shrinks";
        }
        if (until.put(key, end) == null) {
            chars.addAndGet(size);
        }
        return null;
    }

    private void remove(Object key, long size) {
        if (until.remove(key) != null) {
            chars.addAndGet(-size);
            settle();
        }
    }

    /** Over the bound until the set is back to half its entries and characters. */
    private void settle() {
        if (overflowing && until.size() <= MAX_ENTRIES / 2 && chars.get() <= MAX_CHARS / 2) {
            overflowing = false;
        }
    }

    private String heartbeat(String v) {
        if (v == null) {
            heartbeatAtMs = -1;
            return null;
        }
        String[] parts = v.trim().split(" ");
        long at = parts.length == 2 ? number(parts[0]) : -1;
        long age = parts.length == 2 ? number(parts[1]) : -1;
        if (at < 0 || age < 1000 || age > 3_600_000) {
            return "a heartbeat must be 'AT_MS MAX_AGE_MS' (1 s to 1 h), not " + shown(v);
        }
        heartbeatAtMs = at;
        maxAgeMs = age;
        return null;
    }

    /** Drops every throttle that has ended by {@code nowMs}; returns how many. */
    public int prune(long nowMs) {
        int n = 0;
        for (Iterator<Map.Entry<Object, Long>> it = until.entrySet().iterator(); it.hasNext(); ) {
            Map.Entry<Object, Long> e = it.next();
            if (e.getValue() <= nowMs) {
                it.remove();
                Object k = e.getKey();
                chars.addAndGet(-(k instanceof Narrow
                    ? ((Narrow) k).principal.length() + ((Narrow) k).clientId.length()
                    : ((String) k).length()));
                n++;
            }
        }
        settle();
        return n;
    }

    /** Whether InitProducerId is refused to {@code principal} at {@code nowMs}. */
    public boolean refuses(String principal, long nowMs) {
        return refuses(principal, null, nowMs);
    }

    /** Whether InitProducerId is refused to {@code principal}'s client {@code clientId} (null: not
     * known) at {@code nowMs}: the principal is throttled, or that client id of it. */
    public boolean refuses(String principal, String clientId, long nowMs) {
        if (openBecause(nowMs) != null) {
            return false;
        }
        Long end = until.get(principal);
        if (end != null && end > nowMs) {
            return true;
        }
        if (clientId == null) {
            return false;
        }
        Long narrow = until.get(new Narrow(principal, clientId));
        return narrow != null && narrow > nowMs;
    }

    /** Why nothing is refused at {@code nowMs} (fail open), or null when the set is obeyed: one of
     * a few fixed phrases, so that a change of it can be said once. */
    public String openBecause(long nowMs) {
        if (!enabled) {
            return "switched off";
        }
        if (overflowing) {
            return "its state is over the bound (" + MAX_ENTRIES + " entries, " + MAX_CHARS + " characters)";
        }
        long at = heartbeatAtMs;
        if (at < 0) {
            return "no heartbeat of pidquota's";
        }
        if (at - nowMs > SKEW_MS) {
            return "pidquota's heartbeat is dated more than " + SKEW_MS / 1000 + " s ahead of this broker's clock";
        }
        if (nowMs - at > maxAgeMs) {
            return "pidquota's heartbeat is older than its bound (pidquota gone, or its topic unread)";
        }
        return null;
    }

    /** pidquota's heartbeat is recent enough, and not from the future, to obey the set. */
    public boolean fresh(long nowMs) {
        long at = heartbeatAtMs;
        return at >= 0 && nowMs - at <= maxAgeMs && at - nowMs <= SKEW_MS;
    }

    /** The time of the newest heartbeat of pidquota's read (-1: none since the start or a clear). */
    public long heartbeatAt() {
        return heartbeatAtMs;
    }

    public boolean enabled() {
        return enabled;
    }

    /** The set is over its bound, and refuses nothing. */
    public boolean overflowing() {
        return overflowing;
    }

    /** The entries held (ended ones included until pruned). */
    public int size() {
        return until.size();
    }

    /** The principals (and principals' client ids) throttled at {@code nowMs}, heartbeat or not. */
    public int throttled(long nowMs) {
        int n = 0;
        for (Long end : until.values()) {
            if (end > nowMs) {
                n++;
            }
        }
        return n;
    }

    /** Forget everything (the state topic was deleted, recreated or read again from its start):
     * refuse nothing until a heartbeat comes, and the switch is on until the topic says off. */
    public void clear() {
        until.clear();
        chars.set(0);
        overflowing = false;
        heartbeatAtMs = -1;
        enabled = true;
    }

    static String principalProblem(String principal) {
        if (!principal.startsWith("User:") || principal.length() > MAX_PRINCIPAL) {
            return "not a user principal: " + shown(principal);
        }
        String name = principal.substring(5);
        if (name.trim().isEmpty() || name.equals("*")) {
            return "a wildcard or empty principal: " + shown(principal);
        }
        return null;
    }

    private static long number(String s) {
        if (s.isEmpty() || s.length() > 16) {
            return -1;
        }
        long n = 0;
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c < '0' || c > '9') {
                return -1;
            }
            n = n * 10 + (c - '0');
        }
        return n <= MAX_MS ? n : -1;
    }

    private static String text(byte[] bytes) {
        if (bytes == null) {
            return null;
        }
        try {
            return StandardCharsets.UTF_8.newDecoder()
                .onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT)
                .decode(ByteBuffer.wrap(bytes))
                .toString();
        } catch (CharacterCodingException e) {
            return null;
        }
    }

    static String shown(String s) {
        String cut = s.length() > 60 ? s.substring(0, 60) + "..." : s;
        return "'" + cut.replaceAll("\\p{Cntrl}", "?") + "'";
    }
}
