package io.pidquota.plugin;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import org.junit.jupiter.api.Test;

class StateReaderTest {
    private static Properties consumer(Map<String, Object> given) {
        return new StateReader(new ThrottleState(), "state", java.util.List.of(), given, "t", () -> { }, 5000)
            .consumerProps();
    }

    @Test
    void itsFetchWaitsAtTheBrokerForARecordAndIsAnsweredByTheFirstByte() {
        Properties p = consumer(new HashMap<>());
        assertEquals("5000", p.get("fetch.max.wait.ms"));
        assertEquals("1", p.get("fetch.min.bytes"));
        assertEquals("10000", p.get("request.timeout.ms"));
    }

    @Test
    void aUsersFetchSettingsAreKeptWithinTheRequestTimeout() {
        Map<String, Object> given = new HashMap<>();
        given.put("fetch.min.bytes", "65536");  // would hold a throttle back for the whole wait
        given.put("request.timeout.ms", "4000");  // harmless with Kafka's 500 ms wait
        Properties p = consumer(given);
        assertEquals("2000", p.get("fetch.max.wait.ms"));
        assertEquals("1", p.get("fetch.min.bytes"));
        given.clear();
        given.put("fetch.max.wait.ms", 30000);  // an Integer, as a broker's parsed config may hold
        assertEquals("5000", consumer(given).get("fetch.max.wait.ms"));
        given.put("fetch.max.wait.ms", "800");
        assertEquals("800", consumer(given).get("fetch.max.wait.ms"));
    }
}
