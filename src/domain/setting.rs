//! What the dynamic settings' rows and audit record, one name each from the
//! settings room to SQLite and JSON.

use super::named_enum;

named_enum! {
    "kebab-case";
    /// Where a setting's current value came from (RFD 0016's origin label).
    pub enum Origin {
        Defaults,
        ConfigFile,
        Dynamic,
    }
}

named_enum! {
    "snake_case";
    /// What one audited change of a setting did.
    pub enum SettingAction {
        /// Reconciled with the config file at start.
        Start,
        /// Set over a default.
        Create,
        /// Set over a dynamic value (`--force`).
        Force,
        /// Set over a config-file value (`--force --confirm`).
        Confirm,
        /// Back to the default.
        Rm,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_keep_rfd_0016s_names() {
        let names: Vec<&str> = [Origin::Defaults, Origin::ConfigFile, Origin::Dynamic]
            .map(Origin::as_str)
            .to_vec();
        assert_eq!(names, ["defaults", "config-file", "dynamic"]);
        assert_eq!("config-file".parse(), Ok(Origin::ConfigFile));
    }
}
