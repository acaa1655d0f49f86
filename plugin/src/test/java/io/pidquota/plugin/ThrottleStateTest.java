package io.pidquota.plugin;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.Random;
import org.junit.jupiter.api.Test;

class ThrottleStateTest {
    private static byte[] b(String s) {
        return s == null ? null : s.getBytes(StandardCharsets.UTF_8);
    }

    @Test
    void theDocstringsExample() {
        ThrottleState s = new ThrottleState();
        assertNull(s.apply(b("h"), b("1000 30000")));
        assertNull(s.apply(b("t:User:crash"), b("61000")));
        assertTrue(s.refuses("User:crash", 20000));
        assertFalse(s.refuses("User:steady", 20000));
        assertFalse(s.refuses("User:crash", 40000));  // the heartbeat is too old: fail open
        assertNull(s.apply(b("h"), b("65000 30000")));
        assertFalse(s.refuses("User:crash", 70000));  // its throttle ended at 61000
    }

    @Test
    void aClientThrottleRefusesThatClientIdOfThePrincipalAlone() {
        ThrottleState s = new ThrottleState();
        s.apply(b("h"), b("0 60000"));
        assertNull(s.apply(b("c:4:loopUser:crash"), b("99000")));
        assertNull(s.apply(b("c:3:a:bUser:crash"), b("99000")));  // a client id holding a colon
        assertNull(s.apply(b("c:3:\uD83D\uDE00aUser:crash"), b("99000")));  // an emoji: 2 UTF-16 units
        assertTrue(s.refuses("User:crash", "\uD83D\uDE00a", 1000));
        assertTrue(s.refuses("User:crash", "loop", 1000));
        assertTrue(s.refuses("User:crash", "a:b", 1000));
        assertFalse(s.refuses("User:crash", "deploy", 1000));  // its other applications are served
        assertFalse(s.refuses("User:crash", null, 1000));
        assertFalse(s.refuses("User:crash", 1000));
        assertFalse(s.refuses("User:other", "loop", 1000));
        assertEquals(3, s.throttled(1000));
        assertNull(s.apply(b("c:4:loopUser:crash"), null));
        assertFalse(s.refuses("User:crash", "loop", 1000));
        assertNull(s.apply(b("t:User:crash"), b("99000")));  // the whole user: every client id
        assertTrue(s.refuses("User:crash", "deploy", 1000));
    }

    @Test
    void aTombstoneAndTheSwitchEndItAtOnce() {
        ThrottleState s = new ThrottleState();
        s.apply(b("h"), b("0 60000"));
        s.apply(b("t:User:crash"), b("99000"));
        assertNull(s.apply(b("switch"), b("off")));
        assertFalse(s.refuses("User:crash", 1000));
        s.apply(b("switch"), b("on"));
        assertTrue(s.refuses("User:crash", 1000));
        s.apply(b("t:User:crash"), null);
        assertFalse(s.refuses("User:crash", 1000));
    }

    @Test
    void recordsPidquotaWouldNotWriteAreSkippedWithTheReason() {
        ThrottleState s = new ThrottleState();
        s.apply(b("h"), b("0 60000"));
        String[][] bad = {
            {"t:User:*", "99000"}, {"t:User:", "99000"}, {"t:Group:x", "99000"}, {"t:User:a", "soon"},
            {"t:User:a", "-5"}, {"t:User:a", "99999999999999999999"}, {"h", "now"}, {"h", "0 1"},
            {"switch", "maybe"}, {"other", "1"}, {"c:4:loopUser:*", "9"}, {"c:9:loopUser:a", "9"},
            {"c:0:User:a", "9"}, {"c:x:loopUser:a", "9"}, {"c:", "9"}, {"c:4:loop", "9"}, {"c:00004:loopUser:a", "9"},
            {"c:04:loopUser:a", "9"},
        };
        for (String[] kv : bad) {
            assertNotNull(s.apply(b(kv[0]), b(kv[1])), kv[0] + "=" + kv[1]);
        }
        assertNotNull(s.apply(new byte[] {(byte) 0xff, 't', ':'}, b("1")));
        assertNotNull(s.apply(b("t:User:a"), new byte[] {(byte) 0xc3}));
        assertEquals(0, s.throttled(0));
        assertFalse(s.refuses("User:*", 1));
    }

    @Test
    void noBytesMakeItThrow() {  // issue 44, the Java side: a fuzz of keys and values
        ThrottleState s = new ThrottleState();
        Random rng = new Random(936);
        String[] keys = {"t:User:a", "h", "switch", "t:", "t:User:" + "x".repeat(5000), "c:1:aUser:a", "c:9999:a"};
        for (int i = 0; i < 200_000; i++) {
            byte[] key = rng.nextInt(4) == 0 ? random(rng) : b(keys[rng.nextInt(keys.length)]);
            byte[] value = rng.nextInt(10) == 0 ? null : rng.nextBoolean() ? random(rng) : b(Long.toString(rng.nextLong()));
            s.apply(key, value);
            s.refuses("User:a", rng.nextLong());
            s.refuses("User:a", "a", rng.nextLong());
        }
    }

    private static byte[] random(Random rng) {
        byte[] out = new byte[rng.nextInt(40)];
        rng.nextBytes(out);
        return out;
    }
}
