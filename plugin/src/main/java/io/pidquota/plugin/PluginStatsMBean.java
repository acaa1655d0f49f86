package io.pidquota.plugin;

/** What the plug-in shows over JMX ({@code io.pidquota:type=PidQuotaAuthorizer}). */
public interface PluginStatsMBean {
    /** InitProducerId requests refused since the broker started. */
    long getRefused();

    /** 1 while the plug-in refuses nothing (pidquota's heartbeat too old or dated ahead, switched off, the state over its bound). */
    int getFailOpen();

    /** Why it refuses nothing now; empty while it obeys pidquota's set. */
    String getFailOpenReason();

    /** Requests its rule failed on (an exception of its own): refused nothing, handed to Kafka. */
    long getRuleFaults();

    /** Entries held in the state (at most ThrottleState.MAX_ENTRIES). */
    int getEntries();

    /** Reports of this broker's obedience written to pidquota's status topic. */
    long getStatusReportsSent();

    /** Reports that could not be written (no metadata yet, the cluster or the topic not there). */
    long getStatusReportsFailed();

    /** Principals whose throttle has not ended. */
    int getThrottled();

    /** State records skipped as not pidquota's. */
    long getSkippedRecords();

    /** State records read. */
    long getRecordsRead();

    /** InitProducerId answers published to pidquota's inits topic (acknowledged). */
    long getInitsPublished();

    /** Inits not published: the queue full (a record is never waited for on a request thread). */
    long getInitsDropped();

    /** Inits whose record could not be written (the cluster or the topic not there, a bad setting). */
    long getInitsFailed();

    /** Inits waiting in the queue now (at most InitsPublisher.CAPACITY). */
    int getInitsQueued();

    /** Mean time of one InitProducerId authorization the plug-in looked at, in ns. */
    long getMeanInitAuthorizationNanos();

    /** How often its state reader describes pidquota's topics, in ms (pidquota.plugin.check.ms;
     * 0 without a reader). */
    long getCheckMs();
}
