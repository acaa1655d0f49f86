package io.pidquota.plugin;

import java.time.Duration;
import java.util.Collections;
import java.util.HashSet;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Follows pidquota's state topic (one partition, compacted) from its beginning into a
 * {@link ThrottleState}, on a daemon thread of its own: an authorization never waits for it.
 *
 * <p>One consumer and one admin client for the reader's life, made once (their settings are
 * logged once). Every {@code check} the admin client describes the topic: missing, or of more
 * than one partition (pidquota writes one; another's records would be unseen), the state is
 * cleared and nothing is refused; a new topic id (deleted and made again) clears the state and
 * reads the new topic from its start; the consumer going back (a reset to {@code earliest})
 * clears it too. A problem is said once when it starts and once when it ends, and retried after
 * a back-off that doubles from {@code firstBackoff} to {@code MAX_BACKOFF}, with the clients
 * idle meanwhile: a missing topic, a wrong address or a missing ACL costs the broker's log a
 * few lines, not one a second. A cluster that does not answer keeps the state as it was; its
 * heartbeat grows old, so the plug-in refuses nothing once that is over its bound.
 *
 * <p>Memory: the consumer fetches at most {@code FETCH_BYTES} at a time; the state is bounded
 * by {@link ThrottleState} itself. Records pidquota would not write are skipped and counted,
 * said at most once a {@code SAY_EVERY} with how many.
 */
final class StateReader implements Runnable {
    private static final Logger LOG = LoggerFactory.getLogger(StateReader.class);
    static final Duration MAX_BACKOFF = Duration.ofMinutes(2);
    /** How often the topic is described ({@code pidquota.plugin.check.ms}, 5 s by default). */
    private final Duration check;
    /** The first wait after a problem: two fifths of {@code check} (2 s at 5 s). */
    private final Duration firstBackoff;
    /** The longest wait while the cluster answers but the topic is not there yet (or not of one
     * partition): pidquota's first start makes it, and the brokers should see it within seconds;
     * twice {@code check} (10 s at 5 s). */
    private final Duration topicBackoff;
    static final Duration SAY_EVERY = Duration.ofMinutes(1);
    static final int FETCH_BYTES = 1 << 20;
    /** How long the consumer's fetch waits at the broker for a record: the broker answers it at once
     * when one comes, so a longer wait costs no reaction, only fewer fetches (Kafka's default, 500 ms,
     * was two fetches a second: 2 to 3 ms of an idle broker's CPU a second, its handling and the
     * reader's, measured by thread with {@code jcmd Thread.print}). */
    static final int FETCH_WAIT_MS = 5000;

    private final ThrottleState state;
    private final String topic;
    private final Properties consumerProps = new Properties();
    private final Properties adminProps = new Properties();
    private final Runnable tick;
    /** pidquota's other topics, where the plug-in writes (status, inits): whether each exists. */
    private final Map<String, Boolean> written = new java.util.concurrent.ConcurrentHashMap<>();
    /** pidquota's topics the plug-in may not describe, as said (once each). */
    private final Set<String> unwritable = new HashSet<>();
    private final AtomicLong skipped = new AtomicLong();
    private final AtomicLong read = new AtomicLong();
    private volatile boolean running = true;
    private volatile KafkaConsumer<byte[], byte[]> consumer;
    private Admin admin;
    private Uuid topicId;
    private long next = -1;
    private String lastProblem = "";
    private long skippedSaid;
    private long saidAtNanos;
    private final Thread thread;

    /** {@code tick} runs after each check of the topic (the authorizer says a change of its
     * fail-open state there, without waiting for an InitProducerId). */
    StateReader(ThrottleState state, String topic, java.util.Collection<String> writtenTopics,
                Map<String, Object> clientConfigs, String name, Runnable tick, long checkMs) {
        this.state = state;
        this.topic = topic;
        this.check = Duration.ofMillis(checkMs);
        this.firstBackoff = Duration.ofMillis(Math.max(100, checkMs * 2 / 5));
        this.topicBackoff = Duration.ofMillis(2 * checkMs);
        for (String t : writtenTopics) {
            written.put(t, false);
        }
        this.tick = tick;
        for (Map.Entry<String, Object> e : clientConfigs.entrySet()) {
            if (ConsumerConfig.configNames().contains(e.getKey())) {
                consumerProps.put(e.getKey(), e.getValue());
            }
            if (AdminClientConfig.configNames().contains(e.getKey())) {
                adminProps.put(e.getKey(), e.getValue());
            }
        }
        for (Properties p : new Properties[] {consumerProps, adminProps}) {
            // quiet when the cluster is not there: a connection tried at most once a minute
            p.putIfAbsent(ConsumerConfig.RECONNECT_BACKOFF_MS_CONFIG, "2000");
            p.putIfAbsent(ConsumerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "60000");
            p.putIfAbsent(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        }
        consumerProps.putIfAbsent(ConsumerConfig.CLIENT_ID_CONFIG, name);
        adminProps.putIfAbsent(AdminClientConfig.CLIENT_ID_CONFIG, name + "-admin");
        adminProps.putIfAbsent(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "15000");
        // Kafka 4's admin client, rebootstrapping, spins on an address that never answers:
        // 120,000 "Rebootstrapping" lines a minute were measured with the default
        adminProps.putIfAbsent("metadata.recovery.strategy", "none");
        consumerProps.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        consumerProps.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        consumerProps.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        consumerProps.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        // never create the state topic: pidquota creates it, compacted and with its ACLs
        consumerProps.put(ConsumerConfig.ALLOW_AUTO_CREATE_TOPICS_CONFIG, "false");
        consumerProps.put(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, Integer.toString(FETCH_BYTES));
        consumerProps.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, Integer.toString(FETCH_BYTES));
        consumerProps.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "500");
        // a record answers the waiting fetch at once (a larger minimum would hold it up to the wait)
        consumerProps.put(ConsumerConfig.FETCH_MIN_BYTES_CONFIG, "1");
        consumerProps.putIfAbsent(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, Integer.toString(FETCH_WAIT_MS));
        boundFetchWait(consumerProps);
        this.thread = new Thread(this, name);
        thread.setDaemon(true);
    }

    void start() {
        thread.start();
    }

    /** The consumer's settings as the reader makes its consumer (a test's look). */
    Properties consumerProps() {
        return consumerProps;
    }

    /** A fetch's wait kept to half the request timeout at most: a fetch that waits at the broker as
     * long as the client's request timeout is cut by the client, which drops the connection each
     * time (Kafka's client no longer refuses such settings). Only a user's own settings
     * ({@code pidquota.plugin.consumer.*}) can come near it. */
    static void boundFetchWait(Properties p) {
        long timeout = millis(p.get(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG), 30_000);
        long wait = millis(p.get(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG), FETCH_WAIT_MS);
        if (wait > timeout / 2) {
            p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, Long.toString(Math.max(0, timeout / 2)));
        }
    }

    private static long millis(Object value, long otherwise) {
        try {
            return Long.parseLong(String.valueOf(value).trim());
        } catch (NumberFormatException e) {
            return otherwise;  // null, or not a number: Kafka's own check of it says so
        }
    }

    long skipped() {
        return skipped.get();
    }

    long read() {
        return read.get();
    }

    /** How often it describes the topics, in ms. */
    long checkMs() {
        return check.toMillis();
    }

    /** One of pidquota's topics the plug-in writes (status, inits) exists, as seen at the last
     * check: the plug-in's records may go there, and never make it themselves (a producer's
     * metadata request would have the broker make it as a plain topic). */
    boolean exists(String name) {
        return Boolean.TRUE.equals(written.get(name));
    }

    @Override
    public void run() {
        long backoff = firstBackoff.toMillis();
        try {
            while (running) {
                String problem;
                long most = MAX_BACKOFF.toMillis();
                try {
                    problem = check();
                    most = topicBackoff.toMillis();  // the cluster answered: the topic is what waits
                    if (problem == null) {
                        follow(check);  // throws when it cannot read: no "reading" line between two faults
                        say(null);
                        backoff = firstBackoff.toMillis();
                    }
                } catch (WakeupException | InterruptException | InterruptedException e) {
                    return;
                } catch (Exception e) {
                    problem = "cannot read the state topic " + topic + " (" + brief(e)
                        + "): refusing nothing once pidquota's heartbeat is old; retrying";
                }
                tick.run();
                if (problem != null) {
                    say(problem);
                    Thread.sleep(Math.min(backoff, most));
                    backoff = Math.min(backoff * 2, most);
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            closeClients();
        }
    }

    /** The topic as it is now: null when it can be read, else the problem (said by the caller). */
    private String check() throws InterruptedException, ExecutionException, java.util.concurrent.TimeoutException {
        if (admin == null) {
            admin = Admin.create(adminProps);
        }
        if (consumer == null) {
            consumer = new KafkaConsumer<>(consumerProps);
        }
        // one request for every topic: a cluster that does not answer costs one timeout, not one a topic
        Set<String> names = new HashSet<>(written.keySet());
        names.add(topic);
        Map<String, KafkaFuture<TopicDescription>> described = admin.describeTopics(names).topicNameValues();
        for (String name : written.keySet()) {  // the plug-in's reports and inits go without a state topic
            Boolean exists = seen(name, described.get(name));
            if (exists != null) {  // a timeout keeps what was last known
                written.put(name, exists);
            }
        }
        TopicDescription d;
        try {
            d = described.get(topic).get(20, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            if (e.getCause() instanceof UnknownTopicOrPartitionException) {
                forget();
                return "the state topic " + topic + " does not exist (yet): refusing nothing";
            }
            if (e.getCause() instanceof TopicAuthorizationException) {
                return "not allowed to describe the state topic " + topic + ": grant the brokers' principal "
                    + "DESCRIBE and READ on it; refusing nothing once pidquota's heartbeat is old";
            }
            throw e;
        }
        if (d.partitions().size() != 1) {
            forget();
            return "the state topic " + topic + " has " + d.partitions().size()
                + " partitions, and pidquota writes one: refusing nothing (delete it; pidquota makes it anew)";
        }
        if (!d.topicId().equals(topicId)) {  // new, or deleted and made again: read it from its start
            state.clear();
            topicId = d.topicId();
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(Collections.singletonList(tp));
            consumer.seekToBeginning(Collections.singletonList(tp));
            next = -1;
        }
        return null;
    }

    /** Whether a topic the plug-in writes exists: null when that cannot be known now (a timeout,
     * the cluster busy); false when it is missing, or not to be described by the plug-in's principal
     * (said once, until it can be again: the plug-in writes nothing there meanwhile). */
    private Boolean seen(String name, KafkaFuture<TopicDescription> described) throws InterruptedException {
        try {
            Boolean exists = described.get(20, TimeUnit.SECONDS) != null;
            if (unwritable.remove(name)) {
                LOG.info("pidquota plug-in: it may describe {} again", name);
            }
            return exists;
        } catch (ExecutionException e) {
            if (e.getCause() instanceof TopicAuthorizationException && unwritable.add(name)) {
                LOG.warn("pidquota plug-in: not allowed to describe {}: it writes nothing there until it may; grant "
                    + "the principal of its clients (pidquota.plugin.consumer.*) DESCRIBE and WRITE on it", name);
            }
            return e.getCause() instanceof java.util.concurrent.TimeoutException
                || e.getCause() instanceof org.apache.kafka.common.errors.TimeoutException ? null : false;
        } catch (java.util.concurrent.TimeoutException e) {
            return null;
        }
    }

    /** The topic is gone or not pidquota's: nothing of it is obeyed. */
    private void forget() {
        state.clear();
        if (topicId != null && consumer != null) {  // once: the consumer logs each (un)assignment
            consumer.assign(Collections.emptyList());
        }
        topicId = null;
    }

    private void follow(Duration during) {
        long end = System.nanoTime() + during.toNanos();
        for (long left = end - System.nanoTime(); running && left > 0; left = end - System.nanoTime()) {
            // one poll until the next check, unless records come: its fetch waits at the broker
            // (FETCH_WAIT_MS), which answers at once when pidquota writes
            ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofNanos(left));
            long now = System.currentTimeMillis();
            for (ConsumerRecord<byte[], byte[]> r : records) {
                if (r.offset() < next) {  // the consumer went back (reset to earliest): read it anew
                    state.clear();
                }
                next = r.offset() + 1;
                read.incrementAndGet();
                String why = state.apply(r.key(), r.value(), now);
                if (why != null) {
                    skip(r.offset(), why);
                }
            }
        }
        state.prune(System.currentTimeMillis());
        skip(-1, null);
    }

    /** Counts a skipped record (offset -1: none, only a summary that is due) and says it at most
     * once a {@code SAY_EVERY}, with how many since the last line. */
    private void skip(long offset, String why) {
        long n = offset < 0 ? skipped.get() : skipped.incrementAndGet();
        long now = System.nanoTime();
        boolean due = saidAtNanos == 0 || now - saidAtNanos >= SAY_EVERY.toNanos();
        if (n == skippedSaid || !due) {
            return;
        }
        if (offset >= 0) {
            LOG.warn("pidquota plug-in: {} state record(s) of {} skipped, not applied, since the last line; "
                + "offset {}: {}", n - skippedSaid, topic, offset, why);
        } else {
            LOG.warn("pidquota plug-in: {} more state record(s) of {} skipped, not applied (SkippedRecords)",
                n - skippedSaid, topic);
        }
        skippedSaid = n;
        saidAtNanos = now;
    }

    /** One line per change of problem (none: {@code null}), not one per retry: problems that
     * differ only in numbers (a deadline, a count) are the same one. */
    private void say(String problem) {
        String key = problem == null ? "" : problem.replaceAll("[0-9]+", "N");
        if (key.equals(lastProblem)) {
            return;
        }
        if (problem == null) {
            LOG.info("pidquota plug-in: reading the state topic {}", topic);
        } else {
            LOG.warn("pidquota plug-in: {}", problem);
        }
        lastProblem = key;
    }

    private static String brief(Exception e) {
        Throwable t = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
        String m = t.getMessage();
        return t.getClass().getSimpleName() + (m == null ? "" : ": " + ThrottleState.shown(m));
    }

    private void closeClients() {
        if (consumer != null) {
            try {
                consumer.close(Duration.ofSeconds(2));
            } catch (Exception e) {
                LOG.debug("pidquota plug-in: closing its consumer: {}", e.toString());
            }
        }
        if (admin != null) {
            try {
                admin.close(Duration.ofSeconds(2));
            } catch (Exception e) {
                LOG.debug("pidquota plug-in: closing its admin client: {}", e.toString());
            }
        }
    }

    void close() {
        running = false;
        KafkaConsumer<byte[], byte[]> c = consumer;
        if (c != null) {
            c.wakeup();
        }
        thread.interrupt();
        try {
            thread.join(5000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
